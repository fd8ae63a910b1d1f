"""Hugging Face diffusers models train under thunder.jit exactly as in eager.

Tiny configurations of 75 models of diffusers 0.36: UNets (2-D, conditional, SDXL, 3-D, motion, SVD, Kandinsky 3,
Stable Cascade, ...), ControlNets and adapters, autoencoders of images, video and audio, and diffusion transformers
(DiT, PixArt, SD3, Flux, Chroma, AuraFlow, Sana, Qwen-Image, Wan, CogVideoX, LTX-Video, HunyuanVideo, HiDream, ...);
the loss is the mean square of the outputs. One forward+backward and three SGD steps are compared with an eager deep
copy (``tests/parity.py``).
"""

from __future__ import annotations

import pytest
import torch

from tests.parity import check_training_parity
from thunder.core.proxies import DataDependentError

D = pytest.importorskip("diffusers", reason="diffusers is not installed")
from diffusers.models.embeddings import get_1d_rotary_pos_embed, get_2d_rotary_pos_embed_lumina  # noqa: E402

B = 2


def g(*shape):
    return torch.randn(*shape, generator=_GEN)


_GEN = torch.Generator()


def _timesteps():
    return torch.tensor([3, 7])


def unet_motion_from_adapter():
    unet = D.UNet2DConditionModel(
        sample_size=16,
        in_channels=4,
        out_channels=4,
        layers_per_block=1,
        block_out_channels=(32, 64),
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=32,
        attention_head_dim=8,
        norm_num_groups=8,
    )
    adapter = D.MotionAdapter(
        block_out_channels=(32, 64),
        motion_layers_per_block=1,
        motion_num_attention_heads=2,
        motion_norm_num_groups=8,
        motion_max_seq_length=8,
    )
    return D.UNetMotionModel.from_unet2d(unet, adapter)


def controlnet_xs():
    unet = D.UNet2DConditionModel(
        block_out_channels=(32, 64),
        layers_per_block=2,
        sample_size=16,
        in_channels=4,
        out_channels=4,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        cross_attention_dim=32,
        norm_num_groups=8,
        use_linear_projection=True,
    )
    ctrl = D.ControlNetXSAdapter.from_unet(
        unet, size_ratio=0.5, conditioning_embedding_out_channels=(8, 16), learn_time_embedding=True
    )
    return D.UNetControlNetXSModel.from_unet(unet, ctrl)


def reparam_weight_norm(model):
    # the legacy hook-based torch.nn.utils.weight_norm makes a module that cannot be deep-copied: the parametrization
    for m in model.modules():
        if hasattr(m, "weight_g"):
            torch.nn.utils.remove_weight_norm(m)
            torch.nn.utils.parametrizations.weight_norm(m)
    return model


CASES = {  # name -> () -> (model, inputs)
    "unet2d": lambda: (D.UNet2DModel(sample_size=16, in_channels=3, out_channels=3, layers_per_block=1,
        block_out_channels=(32, 64), down_block_types=('DownBlock2D', 'AttnDownBlock2D'),
        up_block_types=('AttnUpBlock2D', 'UpBlock2D'), norm_num_groups=8), dict(sample=g(B, 3, 16, 16),
        timestep=torch.tensor([3, 7]))),
    "unet2d-cond": lambda: (D.UNet2DConditionModel(sample_size=16, in_channels=4, out_channels=4, layers_per_block=1,
        block_out_channels=(32, 64), down_block_types=('CrossAttnDownBlock2D', 'DownBlock2D'),
        up_block_types=('UpBlock2D', 'CrossAttnUpBlock2D'), cross_attention_dim=32, attention_head_dim=8,
        norm_num_groups=8), dict(sample=g(B, 4, 16, 16), timestep=torch.tensor([3, 7]), encoder_hidden_states=g(B, 5,
        32))),
    "vae": lambda: (D.AutoencoderKL(in_channels=3, out_channels=3, down_block_types=('DownEncoderBlock2D',) * 2,
        up_block_types=('UpDecoderBlock2D',) * 2, block_out_channels=(32, 64), latent_channels=4, norm_num_groups=8,
        layers_per_block=1), dict(sample=g(B, 3, 16, 16))),
    "vq": lambda: (D.VQModel(in_channels=3, out_channels=3, down_block_types=('DownEncoderBlock2D',) * 2,
        up_block_types=('UpDecoderBlock2D',) * 2, block_out_channels=(32, 64), latent_channels=4, norm_num_groups=8,
        layers_per_block=1, num_vq_embeddings=16), dict(sample=g(B, 3, 16, 16))),
    "autoencoder-tiny": lambda: (D.AutoencoderTiny(encoder_block_out_channels=(16, 16), decoder_block_out_channels=(16,
        16), num_encoder_blocks=(1, 1), num_decoder_blocks=(1, 1), latent_channels=4), dict(sample=g(B, 3, 16, 16))),
    "dit": lambda: (D.DiTTransformer2DModel(num_attention_heads=2, attention_head_dim=16, in_channels=4, out_channels=4,
        num_layers=2, sample_size=8, patch_size=2, num_embeds_ada_norm=10), dict(hidden_states=g(B, 4, 8, 8),
        timestep=torch.tensor([3, 7]), class_labels=torch.tensor([1, 2]))),
    "pixart": lambda: (D.PixArtTransformer2DModel(num_attention_heads=2, attention_head_dim=16, in_channels=4,
        out_channels=8, num_layers=2, sample_size=8, patch_size=2, cross_attention_dim=32, caption_channels=32),
        dict(hidden_states=g(B, 4, 8, 8), timestep=torch.tensor([3, 7]), encoder_hidden_states=g(B, 5, 32),
        added_cond_kwargs={'resolution': None, 'aspect_ratio': None})),
    "sd3": lambda: (D.SD3Transformer2DModel(sample_size=8, patch_size=2, in_channels=4, num_layers=2,
        attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32, caption_projection_dim=32,
        pooled_projection_dim=16, out_channels=4, pos_embed_max_size=16), dict(hidden_states=g(B, 4, 8, 8),
        encoder_hidden_states=g(B, 5, 32), pooled_projections=g(B, 16), timestep=torch.tensor([3, 7]))),
    "flux": lambda: (D.FluxTransformer2DModel(patch_size=1, in_channels=16, num_layers=1, num_single_layers=1,
        attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32, pooled_projection_dim=16,
        axes_dims_rope=(4, 6, 6)), dict(hidden_states=g(B, 16, 16), encoder_hidden_states=g(B, 5, 32),
        pooled_projections=g(B, 16), timestep=torch.tensor([0.3, 0.7]), img_ids=torch.zeros(16, 3),
        txt_ids=torch.zeros(5, 3))),
    "controlnet": lambda: (D.ControlNetModel(in_channels=4, layers_per_block=1, block_out_channels=(32, 64),
        down_block_types=('CrossAttnDownBlock2D', 'DownBlock2D'), cross_attention_dim=32, attention_head_dim=8,
        norm_num_groups=8, conditioning_embedding_out_channels=(16, 32)), dict(sample=g(B, 4, 16, 16),
        timestep=torch.tensor([3, 7]), encoder_hidden_states=g(B, 5, 32), controlnet_cond=g(B, 3, 32, 32))),
    "prior": lambda: (D.PriorTransformer(num_attention_heads=2, attention_head_dim=16, num_layers=2, embedding_dim=32,
        num_embeddings=5, additional_embeddings=4), dict(hidden_states=g(B, 32), timestep=torch.tensor([3, 7]),
        proj_embedding=g(B, 32), encoder_hidden_states=g(B, 5, 32))),
    "t2i-adapter": lambda: (D.T2IAdapter(in_channels=3, channels=(32, 64), num_res_blocks=1, downscale_factor=4,
        adapter_type='full_adapter'), dict(x=g(B, 3, 32, 32))),
    "wan": lambda: (D.WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=16,
        in_channels=4, out_channels=4, text_dim=32, freq_dim=32, ffn_dim=64, num_layers=2, rope_max_seq_len=32),
        dict(hidden_states=g(B, 4, 2, 8, 8), timestep=torch.tensor([3, 7]), encoder_hidden_states=g(B, 5, 32))),
    "cogvideox": lambda: (D.CogVideoXTransformer3DModel(num_attention_heads=2, attention_head_dim=16, in_channels=4,
        out_channels=4, time_embed_dim=32, text_embed_dim=32, num_layers=2, sample_width=8, sample_height=8,
        sample_frames=5, patch_size=2, max_text_seq_length=5, temporal_compression_ratio=4), dict(hidden_states=g(B, 2,
        4, 8, 8), encoder_hidden_states=g(B, 5, 32), timestep=torch.tensor([3, 7]))),
    "ltx": lambda: (D.LTXVideoTransformer3DModel(in_channels=8, out_channels=8, num_attention_heads=2,
        attention_head_dim=16, cross_attention_dim=32, num_layers=2, caption_channels=32), dict(hidden_states=g(B,
        2 * 4 * 4, 8), encoder_hidden_states=g(B, 5, 32), timestep=torch.tensor([3, 7]),
        encoder_attention_mask=torch.ones(B, 5), num_frames=2, height=4, width=4)),
    "hunyuan-video": lambda: (D.HunyuanVideoTransformer3DModel(in_channels=4, out_channels=4, num_attention_heads=2,
        attention_head_dim=16, num_layers=1, num_single_layers=1, num_refiner_layers=1, text_embed_dim=32,
        pooled_projection_dim=16, rope_axes_dim=(4, 6, 6)), dict(hidden_states=g(B, 4, 1, 8, 8),
        timestep=torch.tensor([3, 7]), encoder_hidden_states=g(B, 5, 32), encoder_attention_mask=torch.ones(B, 5),
        pooled_projections=g(B, 16), guidance=torch.tensor([3.0, 3.0]))),
    "sana": lambda: (D.SanaTransformer2DModel(in_channels=4, out_channels=4, num_attention_heads=2,
        attention_head_dim=16, num_layers=2, num_cross_attention_heads=2, cross_attention_head_dim=16,
        cross_attention_dim=32, caption_channels=32, sample_size=8), dict(hidden_states=g(B, 4, 8, 8),
        encoder_hidden_states=g(B, 5, 32), timestep=torch.tensor([3, 7]))),
    "qwen-image": lambda: (D.QwenImageTransformer2DModel(patch_size=2, in_channels=16, out_channels=4, num_layers=2,
        attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32, axes_dims_rope=(4, 6, 6)),
        dict(hidden_states=g(B, 16, 16), encoder_hidden_states=g(B, 5, 32), encoder_hidden_states_mask=torch.ones(B, 5),
        timestep=torch.tensor([0.3, 0.7]), img_shapes=[(1, 4, 4)] * B, txt_seq_lens=[5, 5])),
    "auraflow": lambda: (D.AuraFlowTransformer2DModel(sample_size=8, patch_size=2, in_channels=4, num_mmdit_layers=1,
        num_single_dit_layers=1, attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32,
        caption_projection_dim=32, out_channels=4, pos_embed_max_size=64), dict(hidden_states=g(B, 4, 8, 8),
        encoder_hidden_states=g(B, 5, 32), timestep=torch.tensor([3, 7]))),
    "unet3d": lambda: (D.UNet3DConditionModel(in_channels=4, out_channels=4, down_block_types=('CrossAttnDownBlock3D',
        'DownBlock3D'), up_block_types=('UpBlock3D', 'CrossAttnUpBlock3D'), block_out_channels=(32, 64),
        layers_per_block=1, norm_num_groups=8, cross_attention_dim=32, attention_head_dim=8), dict(sample=g(B, 4, 2, 16,
        16), timestep=torch.tensor([3, 7]), encoder_hidden_states=g(B, 5, 32))),
    "vae-wan": lambda: (D.AutoencoderKLWan(base_dim=16, z_dim=4, dim_mult=[1, 2], num_res_blocks=1,
        temperal_downsample=[True], latents_mean=[0.0] * 4, latents_std=[1.0] * 4), dict(sample=g(B, 3, 5, 16, 16))),
    "lumina2": lambda: (D.Lumina2Transformer2DModel(sample_size=8, patch_size=2, in_channels=4, hidden_size=32,
        num_layers=2, num_refiner_layers=1, num_attention_heads=2, num_kv_heads=1, multiple_of=16, axes_dim_rope=(4, 6,
        6), axes_lens=(32, 32, 32), cap_feat_dim=32), dict(hidden_states=g(B, 4, 8, 8), timestep=torch.tensor([0.3,
        0.7]), encoder_hidden_states=g(B, 5, 32), encoder_attention_mask=torch.ones(B, 5, dtype=torch.bool))),
    "chroma": lambda: (D.ChromaTransformer2DModel(patch_size=1, in_channels=16, num_layers=1, num_single_layers=1,
        attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32, axes_dims_rope=(4, 6, 6),
        approximator_num_channels=16, approximator_hidden_dim=32, approximator_layers=1), dict(hidden_states=g(B, 16,
        16), encoder_hidden_states=g(B, 5, 32), timestep=torch.tensor([0.3, 0.7]), img_ids=torch.zeros(16, 3),
        txt_ids=torch.zeros(5, 3))),
    # more UNets, autoencoders, transformers, control models and video models
    "unet-motion": lambda: (D.UNetMotionModel(sample_size=16, in_channels=4, out_channels=4, block_out_channels=(32,
        64), norm_num_groups=8, down_block_types=('CrossAttnDownBlockMotion', 'DownBlockMotion'),
        up_block_types=('UpBlockMotion', 'CrossAttnUpBlockMotion'), cross_attention_dim=32, num_attention_heads=2,
        motion_num_attention_heads=2, motion_max_seq_length=8, layers_per_block=1), dict(sample=g(B, 4, 2, 16, 16),
        timestep=_timesteps(), encoder_hidden_states=g(B * 2, 5, 32))),
    "unet-motion-adapter": lambda: (unet_motion_from_adapter(), dict(sample=g(B, 4, 2, 16, 16), timestep=_timesteps(),
        encoder_hidden_states=g(B * 2, 5, 32))),
    "kandinsky3": lambda: (D.Kandinsky3UNet(in_channels=4, time_embedding_dim=32, groups=8, attention_head_dim=8,
        layers_per_block=2, block_out_channels=(32, 64), cross_attention_dim=32, encoder_hid_dim=32), dict(sample=g(B,
        4, 16, 16), timestep=_timesteps(), encoder_hidden_states=g(B, 5, 32), encoder_attention_mask=torch.ones(B,
        5))),
    "uvit2d": lambda: (D.UVit2DModel(hidden_size=32, cond_embed_dim=32, micro_cond_encode_dim=2,
        micro_cond_embed_dim=10, encoder_hidden_size=32, vocab_size=40, codebook_size=32, in_channels=32,
        block_out_channels=32, num_res_blocks=1, downsample=True, upsample=True, block_num_heads=2, num_hidden_layers=1,
        num_attention_heads=2, intermediate_size=64, sample_size=8), dict(input_ids=torch.randint(0, 32, (B, 8, 8),
        generator=_GEN), encoder_hidden_states=g(B, 5, 32), pooled_text_emb=g(B, 32), micro_conds=torch.tensor([[512.0,
        512, 0, 0, 6]] * B))),
    "stable-cascade": lambda: (D.StableCascadeUNet(in_channels=4, out_channels=4, timestep_ratio_embedding_dim=16,
        conditioning_dim=32, block_out_channels=(32, 64), num_attention_heads=(2, 2), down_num_layers_per_block=(1, 1),
        up_num_layers_per_block=(1, 1), clip_text_in_channels=32, clip_text_pooled_in_channels=32,
        clip_image_in_channels=32, switch_level=(False,), dropout=(0.1, 0.1)), dict(sample=g(B, 4, 16, 16),
        timestep_ratio=torch.tensor([0.3, 0.7]), clip_text_pooled=g(B, 1, 32), clip_text=g(B, 5, 32), clip_img=g(B, 1,
        32))),
    "allegro": lambda: (D.AllegroTransformer3DModel(num_attention_heads=2, attention_head_dim=16, in_channels=4,
        out_channels=4, num_layers=1, cross_attention_dim=32, sample_width=8, sample_height=8, sample_frames=8,
        caption_channels=32), dict(hidden_states=g(B, 4, 2, 8, 8), encoder_hidden_states=g(B, 5, 32),
        timestep=_timesteps())),
    "mochi": lambda: (D.MochiTransformer3DModel(patch_size=2, num_attention_heads=2, attention_head_dim=16,
        num_layers=2, pooled_projection_dim=16, in_channels=4, text_embed_dim=32, time_embed_dim=16,
        max_sequence_length=16), dict(hidden_states=g(B, 4, 2, 8, 8), encoder_hidden_states=g(B, 5, 32),
        timestep=_timesteps(), encoder_attention_mask=torch.ones(B, 5, dtype=torch.bool))),
    "cogview3plus": lambda: (D.CogView3PlusTransformer2DModel(patch_size=2, in_channels=4, num_layers=2,
        attention_head_dim=16, num_attention_heads=2, out_channels=4, text_embed_dim=32, time_embed_dim=32,
        condition_dim=4, pos_embed_max_size=8, sample_size=8), dict(hidden_states=g(B, 4, 8, 8),
        encoder_hidden_states=g(B, 5, 32), timestep=_timesteps(), original_size=torch.tensor([[64, 64]] * B),
        target_size=torch.tensor([[64, 64]] * B), crop_coords=torch.tensor([[0, 0]] * B))),
    "cogview4": lambda: (D.CogView4Transformer2DModel(patch_size=2, in_channels=4, out_channels=4, num_layers=2,
        attention_head_dim=16, num_attention_heads=2, text_embed_dim=32, time_embed_dim=32, condition_dim=4,
        rope_axes_dim=(8, 8)), dict(hidden_states=g(B, 4, 8, 8), encoder_hidden_states=g(B, 5, 32),
        timestep=_timesteps(), original_size=torch.tensor([[64, 64]] * B), target_size=torch.tensor([[64, 64]] * B),
        crop_coords=torch.tensor([[0, 0]] * B))),
    "hidream": lambda: (D.HiDreamImageTransformer2DModel(patch_size=2, in_channels=4, out_channels=4, num_layers=1,
        num_single_layers=1, attention_head_dim=16, num_attention_heads=2, caption_channels=[32, 16], text_emb_dim=32,
        num_routed_experts=2, num_activated_experts=2, axes_dims_rope=(8, 4, 4), max_resolution=(16, 16),
        llama_layers=(0, 1)), dict(hidden_states=g(B, 4, 16, 16), timesteps=_timesteps(), encoder_hidden_states_t5=g(B,
        5, 32), encoder_hidden_states_llama3=g(2, B, 5, 16), pooled_embeds=g(B, 32))),
    "hidream-infer": lambda: (D.HiDreamImageTransformer2DModel(patch_size=2, in_channels=4, out_channels=4,
        num_layers=1, num_single_layers=1, attention_head_dim=16, num_attention_heads=2, caption_channels=[32, 16],
        text_emb_dim=32, num_routed_experts=2, num_activated_experts=2, axes_dims_rope=(8, 4, 4), max_resolution=(16,
        16), llama_layers=(0, 1), force_inference_output=True), dict(hidden_states=g(B, 4, 16, 16),
        timesteps=_timesteps(), encoder_hidden_states_t5=g(B, 5, 32), encoder_hidden_states_llama3=g(2, B, 5, 16),
        pooled_embeds=g(B, 32))),
    "omnigen": lambda: (D.OmniGenTransformer2DModel(hidden_size=32, num_attention_heads=2, num_key_value_heads=2,
        intermediate_size=64, num_layers=2, pad_token_id=0, vocab_size=100, in_channels=4, time_step_dim=16,
        rope_scaling={'long_factor': [1.0] * 8, 'short_factor': [1.0] * 8}), dict(hidden_states=g(B, 4, 8, 8),
        timestep=torch.tensor([0.3, 0.7]), input_ids=torch.randint(1, 100, (B, 24), generator=_GEN),
        input_img_latents=[g(1, 4, 8, 8)], input_image_sizes={0: [[0, 16]]}, attention_mask=torch.ones(B, 24 + 1 + 16,
        24 + 1 + 16), position_ids=torch.arange(24 + 1 + 16).repeat(B, 1))),
    "stable-audio": lambda: (D.StableAudioDiTModel(sample_size=8, in_channels=4, num_layers=2, attention_head_dim=16,
        num_attention_heads=2, num_key_value_attention_heads=1, out_channels=4, cross_attention_dim=32,
        time_proj_dim=16, global_states_input_dim=32, cross_attention_input_dim=32), dict(hidden_states=g(B, 4, 8),
        timestep=_timesteps(), encoder_hidden_states=g(B, 5, 32), global_hidden_states=g(B, 1, 32),
        rotary_embedding=get_1d_rotary_pos_embed(8, 9, use_real=True, repeat_interleave_real=False))),
    "lumina-next": lambda: (D.LuminaNextDiT2DModel(sample_size=8, patch_size=2, in_channels=4, hidden_size=32,
        num_layers=2, num_attention_heads=2, num_kv_heads=1, multiple_of=16, learn_sigma=False, qk_norm=True,
        cross_attention_dim=32), dict(hidden_states=g(B, 4, 8, 8), timestep=torch.tensor([0.3, 0.7]),
        encoder_hidden_states=g(B, 5, 32), encoder_mask=torch.ones(B, 5),
        image_rotary_emb=get_2d_rotary_pos_embed_lumina(16, 384, 384), cross_attention_kwargs={})),
    "hunyuan-dit": lambda: (D.HunyuanDiT2DModel(num_attention_heads=2, attention_head_dim=16, in_channels=4,
        patch_size=2, sample_size=8, hidden_size=32, num_layers=2, cross_attention_dim=32, cross_attention_dim_t5=32,
        pooled_projection_dim=16, text_len=5, text_len_t5=5), dict(hidden_states=g(B, 4, 8, 8),
        timestep=torch.tensor([3.0, 7.0]), encoder_hidden_states=g(B, 5, 32), text_embedding_mask=torch.ones(B, 5),
        encoder_hidden_states_t5=g(B, 5, 32), text_embedding_mask_t5=torch.ones(B, 5), image_meta_size=g(B, 6),
        style=torch.tensor([0, 0]), image_rotary_emb=None)),
    "easyanimate": lambda: (D.EasyAnimateTransformer3DModel(num_attention_heads=2, attention_head_dim=16, in_channels=4,
        out_channels=4, patch_size=2, sample_width=8, sample_height=8, num_layers=2, mmdit_layers=2, time_embed_dim=16,
        text_embed_dim=32), dict(hidden_states=g(B, 4, 2, 8, 8), timestep=_timesteps(), encoder_hidden_states=g(B, 5,
        32))),
    "consisid": lambda: (D.ConsisIDTransformer3DModel(num_attention_heads=2, attention_head_dim=24, in_channels=4,
        out_channels=4, time_embed_dim=16, text_embed_dim=32, num_layers=1, sample_width=8, sample_height=8,
        sample_frames=8, patch_size=2, temporal_compression_ratio=4, max_text_seq_length=5, cross_attn_interval=1,
        is_kps=False, is_train_face=True, cross_attn_dim_head=8, cross_attn_num_heads=2, LFE_id_dim=4, LFE_vit_dim=4,
        LFE_depth=5, LFE_dim_head=8, LFE_num_heads=2, LFE_num_id_token=1, LFE_num_querie=1, LFE_output_dim=32,
        LFE_ff_mult=1, LFE_num_scale=1), dict(hidden_states=g(B, 1, 4, 8, 8), encoder_hidden_states=g(B, 5, 32),
        timestep=_timesteps(), id_vit_hidden=[g(B, 2, 4)], id_cond=g(B, 4))),
    "vae-cogvideox": lambda: (D.AutoencoderKLCogVideoX(in_channels=3, out_channels=3,
        down_block_types=('CogVideoXDownBlock3D',) * 3, up_block_types=('CogVideoXUpBlock3D',) * 3,
        block_out_channels=(16, 16, 32), latent_channels=4, layers_per_block=1, norm_num_groups=4,
        temporal_compression_ratio=4), dict(sample=g(B, 3, 5, 16, 16))),
    "vae-hunyuan-video": lambda: (D.AutoencoderKLHunyuanVideo(in_channels=3, out_channels=3, latent_channels=4,
        down_block_types=('HunyuanVideoDownBlock3D',) * 4, up_block_types=('HunyuanVideoUpBlock3D',) * 4,
        block_out_channels=(8, 8, 8, 8), layers_per_block=1, norm_num_groups=4, spatial_compression_ratio=8,
        temporal_compression_ratio=4, mid_block_add_attention=True), dict(sample=g(B, 3, 5, 16, 16))),
    "vae-ltx": lambda: (D.AutoencoderKLLTXVideo(in_channels=3, out_channels=3, latent_channels=8, block_out_channels=(8,
        8, 8, 8), decoder_block_out_channels=(8, 8, 8, 8), layers_per_block=(1, 1, 1, 1, 1),
        decoder_layers_per_block=(1, 1, 1, 1, 1), spatio_temporal_scaling=(True, True, False, False),
        decoder_spatio_temporal_scaling=(True, True, False, False), decoder_inject_noise=(False,) * 5,
        upsample_residual=(False,) * 4, upsample_factor=(1,) * 4, timestep_conditioning=False, patch_size=1,
        patch_size_t=1, encoder_causal=True, decoder_causal=False), dict(sample=g(B, 3, 5, 16, 16))),
    "vae-ltx091": lambda: (D.AutoencoderKLLTXVideo(in_channels=3, out_channels=3, latent_channels=8,
        block_out_channels=(8, 8, 8, 8), decoder_block_out_channels=(16, 32, 64), layers_per_block=(1, 1, 1, 1),
        decoder_layers_per_block=(1, 1, 1, 1), spatio_temporal_scaling=(True, True, True, False),
        decoder_spatio_temporal_scaling=(True, True, True), decoder_inject_noise=(True, True, True, False),
        upsample_residual=(True, True, True), upsample_factor=(2, 2, 2), timestep_conditioning=True, patch_size=1,
        patch_size_t=1, encoder_causal=True, decoder_causal=False), dict(sample=g(B, 3, 9, 16, 16),
        temb=torch.tensor([0.05] * B))),
    "vae-mochi": lambda: (D.AutoencoderKLMochi(in_channels=15, out_channels=3, latent_channels=4,
        encoder_block_out_channels=(32, 32, 32, 32), decoder_block_out_channels=(32, 32, 32, 32), layers_per_block=(1,
        1, 1, 1, 1), scaling_factor=1), dict(sample=g(B, 3, 7, 16, 16))),
    "oobleck-param": lambda: (reparam_weight_norm(D.AutoencoderOobleck(encoder_hidden_size=16, decoder_channels=16,
        decoder_input_channels=8, audio_channels=2, downsampling_ratios=[2, 4], channel_multiples=[1, 2])),
        dict(sample=g(B, 2, 24))),
    "vae-dc": lambda: (D.AutoencoderDC(in_channels=3, latent_channels=4, attention_head_dim=8,
        encoder_block_types=('ResBlock', 'EfficientViTBlock'), decoder_block_types=('ResBlock', 'EfficientViTBlock'),
        encoder_block_out_channels=(16, 32), decoder_block_out_channels=(16, 32), encoder_qkv_multiscales=((), (5,)),
        decoder_qkv_multiscales=((), (5,)), encoder_layers_per_block=(1, 1), decoder_layers_per_block=(1, 1),
        downsample_block_type='conv', upsample_block_type='interpolate', decoder_norm_types='rms_norm',
        decoder_act_fns='silu', scaling_factor=0.41407), dict(sample=g(B, 3, 16, 16))),
    "vae-dc-shuffle": lambda: (D.AutoencoderDC(in_channels=3, latent_channels=4, attention_head_dim=8,
        encoder_block_types=('ResBlock', 'EfficientViTBlock'), decoder_block_types=('ResBlock', 'EfficientViTBlock'),
        encoder_block_out_channels=(16, 32), decoder_block_out_channels=(16, 32), encoder_qkv_multiscales=((), (5,)),
        decoder_qkv_multiscales=((), (5,)), encoder_layers_per_block=(1, 1), decoder_layers_per_block=(1, 1),
        downsample_block_type='pixel_unshuffle', upsample_block_type='pixel_shuffle', decoder_norm_types=('batch_norm',
        'rms_norm'), decoder_act_fns=('relu', 'silu')), dict(sample=g(B, 3, 16, 16))),
    "vae-asym": lambda: (D.AsymmetricAutoencoderKL(in_channels=3, out_channels=3,
        down_block_types=('DownEncoderBlock2D',) * 2, down_block_out_channels=(16, 32), layers_per_down_block=1,
        up_block_types=('UpDecoderBlock2D',) * 2, up_block_out_channels=(16, 32), layers_per_up_block=1,
        latent_channels=4, norm_num_groups=8, sample_size=16), dict(sample=g(B, 3, 16, 16), mask=torch.ones(B, 1, 16,
        16))),
    "unet2d-sdxl": lambda: (D.UNet2DConditionModel(sample_size=16, in_channels=4, out_channels=4, layers_per_block=1,
        block_out_channels=(32, 64), down_block_types=('DownBlock2D', 'CrossAttnDownBlock2D'),
        up_block_types=('CrossAttnUpBlock2D', 'UpBlock2D'), transformer_layers_per_block=(1, 2), cross_attention_dim=32,
        attention_head_dim=(2, 4), use_linear_projection=True, norm_num_groups=8, addition_embed_type='text_time',
        addition_time_embed_dim=8, projection_class_embeddings_input_dim=32 + 6 * 8), dict(sample=g(B, 4, 16, 16),
        timestep=_timesteps(), encoder_hidden_states=g(B, 5, 32), added_cond_kwargs={'text_embeds': g(B, 32),
        'time_ids': torch.tensor([[64.0, 64, 0, 0, 64, 64]] * B)})),
    "sd3-controlnet": lambda: (D.SD3ControlNetModel(sample_size=8, patch_size=2, in_channels=4, num_layers=1,
        attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32, caption_projection_dim=32,
        pooled_projection_dim=16, out_channels=4, pos_embed_max_size=16), dict(hidden_states=g(B, 4, 8, 8),
        controlnet_cond=g(B, 4, 8, 8), encoder_hidden_states=g(B, 5, 32), pooled_projections=g(B, 16),
        timestep=_timesteps())),
    "flux-controlnet": lambda: (D.FluxControlNetModel(patch_size=1, in_channels=16, num_layers=1, num_single_layers=1,
        attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32, pooled_projection_dim=16,
        axes_dims_rope=[4, 6, 6]), dict(hidden_states=g(B, 16, 16), controlnet_cond=g(B, 16, 16),
        encoder_hidden_states=g(B, 5, 32), pooled_projections=g(B, 16), timestep=torch.tensor([0.3, 0.7]),
        img_ids=torch.zeros(16, 3), txt_ids=torch.zeros(5, 3))),
    "unet-svd": lambda: (D.UNetSpatioTemporalConditionModel(sample_size=16, in_channels=4, out_channels=4,
        block_out_channels=(32, 64), down_block_types=('CrossAttnDownBlockSpatioTemporal', 'DownBlockSpatioTemporal'),
        up_block_types=('UpBlockSpatioTemporal', 'CrossAttnUpBlockSpatioTemporal'), cross_attention_dim=32,
        num_attention_heads=(2, 4), layers_per_block=1, addition_time_embed_dim=8,
        projection_class_embeddings_input_dim=24, num_frames=2), dict(sample=g(B, 2, 4, 16, 16),
        timestep=torch.tensor([10.0]), encoder_hidden_states=g(B, 1, 32), added_time_ids=torch.tensor([[6, 127,
        0.02]] * B))),
    "i2vgen-xl": lambda: (D.I2VGenXLUNet(sample_size=16, in_channels=4, out_channels=4,
        down_block_types=('CrossAttnDownBlock3D', 'DownBlock3D'), up_block_types=('UpBlock3D', 'CrossAttnUpBlock3D'),
        block_out_channels=(32, 64), layers_per_block=1, norm_num_groups=8, cross_attention_dim=32,
        attention_head_dim=8, num_attention_heads=None), dict(sample=g(B, 4, 2, 16, 16), timestep=_timesteps(),
        fps=torch.tensor([8, 8]), image_latents=g(B, 4, 2, 16, 16), image_embeddings=g(B, 32),
        encoder_hidden_states=g(B, 5, 32))),
    "vae-temporal-decoder": lambda: (D.AutoencoderKLTemporalDecoder(in_channels=3, out_channels=3,
        down_block_types=('DownEncoderBlock2D',) * 2, block_out_channels=(32, 64), layers_per_block=1,
        latent_channels=4), dict(sample=g(2 * B, 3, 16, 16), num_frames=2)),
    "vae-magvit": lambda: (D.AutoencoderKLMagvit(in_channels=3, latent_channels=4, out_channels=3,
        block_out_channels=[8, 8, 8, 8], down_block_types=['SpatialDownBlock3D', 'SpatialTemporalDownBlock3D',
        'SpatialTemporalDownBlock3D', 'SpatialTemporalDownBlock3D'], up_block_types=['SpatialUpBlock3D',
        'SpatialTemporalUpBlock3D', 'SpatialTemporalUpBlock3D', 'SpatialTemporalUpBlock3D'], layers_per_block=1,
        norm_num_groups=8, spatial_group_norm=True), dict(sample=g(B, 3, 9, 16, 16))),
    "controlnet-xs": lambda: (controlnet_xs(), dict(sample=g(B, 4, 16, 16), timestep=_timesteps(),
        encoder_hidden_states=g(B, 5, 32), controlnet_cond=g(B, 3, 32, 32), conditioning_scale=1.0)),
    "latte": lambda: (D.LatteTransformer3DModel(sample_size=8, num_layers=1, patch_size=2, attention_head_dim=16,
        num_attention_heads=2, caption_channels=32, in_channels=4, cross_attention_dim=32, out_channels=8,
        video_length=2, attention_bias=True, activation_fn='gelu-approximate', num_embeds_ada_norm=1000,
        norm_type='ada_norm_single', norm_elementwise_affine=False, norm_eps=1e-06), dict(hidden_states=g(B, 4, 2, 8,
        8), encoder_hidden_states=g(B, 5, 32), timestep=_timesteps(), enable_temporal_attentions=True)),
    "skyreels-v2": lambda: (D.SkyReelsV2Transformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2,
        attention_head_dim=16, in_channels=4, out_channels=4, text_dim=32, freq_dim=32, ffn_dim=64, num_layers=2,
        rope_max_seq_len=32), dict(hidden_states=g(B, 4, 2, 8, 8), encoder_hidden_states=g(B, 5, 32),
        timestep=_timesteps())),
    "bria": lambda: (D.BriaTransformer2DModel(patch_size=1, in_channels=4, num_layers=1, num_single_layers=1,
        attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32, pooled_projection_dim=None,
        axes_dims_rope=[0, 8, 8]), dict(hidden_states=g(B, 16, 4), encoder_hidden_states=g(B, 5, 32), img_ids=g(16, 3),
        txt_ids=g(5, 3), timestep=torch.tensor([1.0, 1.0]))),
    "prx": lambda: (D.PRXTransformer2DModel(in_channels=4, patch_size=2, context_in_dim=32, hidden_size=32,
        mlp_ratio=2.0, num_heads=2, depth=2, axes_dim=[8, 8]), dict(hidden_states=g(B, 4, 8, 8),
        encoder_hidden_states=g(B, 5, 32), timestep=torch.tensor([0.3, 0.7]))),
    "sana-video": lambda: (D.SanaVideoTransformer3DModel(in_channels=4, out_channels=4, num_attention_heads=2,
        attention_head_dim=16, num_layers=2, num_cross_attention_heads=2, cross_attention_head_dim=16,
        cross_attention_dim=32, caption_channels=32, sample_size=8, rope_max_seq_len=32), dict(hidden_states=g(B, 4, 2,
        8, 8), encoder_hidden_states=g(B, 5, 32), timestep=_timesteps())),
    "unet2d-skip-fir": lambda: (D.UNet2DModel(sample_size=16, in_channels=3, out_channels=3, layers_per_block=1,
        block_out_channels=(32, 64), down_block_types=('SkipDownBlock2D', 'AttnSkipDownBlock2D'),
        up_block_types=('AttnSkipUpBlock2D', 'SkipUpBlock2D'), norm_num_groups=8, time_embedding_type='fourier',
        resnet_time_scale_shift='default', add_attention=True), dict(sample=g(B, 3, 16, 16), timestep=torch.tensor([0.3,
        0.7]))),
    "unet2d-resnet-ds": lambda: (D.UNet2DModel(sample_size=16, in_channels=3, out_channels=3, layers_per_block=1,
        block_out_channels=(32, 64), down_block_types=('ResnetDownsampleBlock2D', 'AttnDownBlock2D'),
        up_block_types=('AttnUpBlock2D', 'ResnetUpsampleBlock2D'), norm_num_groups=8,
        resnet_time_scale_shift='scale_shift', class_embed_type='timestep', num_class_embeds=None,
        attn_norm_num_groups=8), dict(sample=g(B, 3, 16, 16), timestep=_timesteps(), class_labels=torch.tensor([1,
        2]))),
    "unet2d-k-upscaler": lambda: (D.UNet2DConditionModel(sample_size=16, in_channels=4, out_channels=4,
        layers_per_block=1, block_out_channels=(32, 64, 64), down_block_types=('KDownBlock2D', 'KCrossAttnDownBlock2D',
        'KCrossAttnDownBlock2D'), up_block_types=('KCrossAttnUpBlock2D', 'KCrossAttnUpBlock2D', 'KUpBlock2D'),
        mid_block_type=None, act_fn='gelu', norm_num_groups=None, cross_attention_dim=32, attention_head_dim=8,
        time_embedding_type='fourier', time_embedding_act_fn='gelu', resnet_time_scale_shift='ada_group',
        timestep_post_act='gelu', time_cond_proj_dim=16, conv_in_kernel=1, conv_out_kernel=1, time_embedding_dim=64,
        flip_sin_to_cos=True, downsample_padding=1), dict(sample=g(B, 4, 16, 16), timestep=torch.tensor([0.3, 0.7]),
        encoder_hidden_states=g(B, 5, 32), timestep_cond=g(B, 16))),
    "transformer2d-vq": lambda: (D.Transformer2DModel(num_attention_heads=2, attention_head_dim=16,
        num_vector_embeds=17, sample_size=4, num_layers=1, cross_attention_dim=32, num_embeds_ada_norm=10,
        activation_fn='geglu-approximate', norm_type='ada_norm'), dict(hidden_states=torch.randint(0, 16, (B, 16),
        generator=_GEN), encoder_hidden_states=g(B, 5, 32), timestep=torch.tensor(3))),
    "transformer2d-zero": lambda: (D.Transformer2DModel(num_attention_heads=2, attention_head_dim=16, in_channels=4,
        out_channels=4, num_layers=1, sample_size=8, patch_size=2, num_embeds_ada_norm=10, norm_type='ada_norm_zero',
        activation_fn='gelu-approximate'), dict(hidden_states=g(B, 4, 8, 8), timestep=_timesteps(),
        class_labels=torch.tensor([1, 2]))),
    "transformer2d-cont": lambda: (D.Transformer2DModel(num_attention_heads=2, attention_head_dim=16, in_channels=32,
        num_layers=1, norm_num_groups=8, cross_attention_dim=32, use_linear_projection=False,
        only_cross_attention=False, double_self_attention=False, upcast_attention=True, activation_fn='geglu',
        attention_type='gated', norm_type='layer_norm'), dict(hidden_states=g(B, 32, 8, 8), encoder_hidden_states=g(B,
        5, 32), cross_attention_kwargs={'gligen': {'objs': g(B, 3, 32)}})),
    "wan-vace": lambda: (D.WanVACETransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=16,
        in_channels=4, out_channels=4, text_dim=32, freq_dim=32, ffn_dim=64, num_layers=2, rope_max_seq_len=32,
        vace_layers=[0, 1], vace_in_channels=12), dict(hidden_states=g(B, 4, 2, 8, 8), encoder_hidden_states=g(B, 5,
        32), control_hidden_states=g(B, 12, 2, 8, 8), timestep=_timesteps())),
    "chronoedit": lambda: (D.ChronoEditTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2,
        attention_head_dim=16, in_channels=4, out_channels=4, text_dim=32, freq_dim=32, ffn_dim=64, num_layers=2,
        rope_max_seq_len=64, rope_temporal_skip_len=8), dict(hidden_states=g(B, 4, 2, 8, 8), timestep=_timesteps(),
        encoder_hidden_states=g(B, 5, 32))),
    "z-image": lambda: (D.ZImageTransformer2DModel(all_patch_size=(2,), all_f_patch_size=(1,), in_channels=4, dim=32,
        n_layers=1, n_refiner_layers=1, n_heads=2, n_kv_heads=2, qk_norm=True, cap_feat_dim=32, axes_dims=[8, 4, 4],
        axes_lens=[64, 16, 16]), dict(x=[g(4, 1, 8, 8) for _ in range(B)], cap_feats=[g(5, 32), g(7, 32)],
        t=torch.tensor([0.3, 0.7]))),
    "framepack": lambda: (D.HunyuanVideoFramepackTransformer3DModel(in_channels=4, out_channels=4,
        num_attention_heads=2, attention_head_dim=16, num_layers=1, num_single_layers=1, num_refiner_layers=1,
        patch_size=2, patch_size_t=1, guidance_embeds=True, text_embed_dim=32, pooled_projection_dim=16,
        rope_axes_dim=(4, 6, 6), image_condition_type=None, has_image_proj=True, image_proj_dim=32,
        has_clean_x_embedder=True), dict(hidden_states=g(B, 4, 3, 4, 4), timestep=_timesteps(),
        encoder_hidden_states=g(B, 5, 32), encoder_attention_mask=torch.ones(B, 5), pooled_projections=g(B, 16),
        guidance=torch.tensor([3.0, 3.0]), image_embeds=g(B, 5, 32), indices_latents=torch.arange(3), latents_clean=g(B,
        4, 2, 4, 4), indices_latents_clean=torch.arange(2), latents_history_2x=g(B, 4, 2, 4, 4),
        indices_latents_history_2x=torch.arange(2), latents_history_4x=g(B, 4, 8, 4, 4),
        indices_latents_history_4x=torch.arange(8))),
    "sparse-controlnet": lambda: (D.SparseControlNetModel(block_out_channels=(32, 64), layers_per_block=1,
        in_channels=4, conditioning_channels=3, down_block_types=('CrossAttnDownBlockMotion', 'DownBlockMotion'),
        cross_attention_dim=32, conditioning_embedding_out_channels=(8, 8), norm_num_groups=8,
        use_simplified_condition_embedding=False, motion_num_attention_heads=2, motion_max_seq_length=8,
        attention_head_dim=8), dict(sample=g(B, 4, 2, 16, 16), timestep=_timesteps(), encoder_hidden_states=g(B * 2, 5,
        32), controlnet_cond=g(B, 3, 2, 32, 32), conditioning_mask=torch.ones(B, 1, 2, 32, 32))),
    "sana-controlnet": lambda: (D.SanaControlNetModel(patch_size=1, in_channels=4, out_channels=4, num_layers=1,
        num_attention_heads=2, attention_head_dim=16, num_cross_attention_heads=2, cross_attention_head_dim=16,
        cross_attention_dim=32, caption_channels=32, sample_size=8), dict(hidden_states=g(B, 4, 8, 8),
        encoder_hidden_states=g(B, 5, 32), timestep=_timesteps(), controlnet_cond=g(B, 4, 8, 8))),
    "vae-qwenimage": lambda: (D.AutoencoderKLQwenImage(base_dim=16, z_dim=4, dim_mult=[1, 2], num_res_blocks=1,
        temperal_downsample=[True], latents_mean=[0.0] * 4, latents_std=[1.0] * 4), dict(sample=g(B, 3, 5, 16, 16))),
}

# Each reads tensor values in Python, computed from parameters or of run-time extents. (Lumina 2's caption lengths,
# ``encoder_attention_mask.sum(dim=1).tolist()``, OmniGen's ``if torch.max(position_ids) + 1 > ...`` and FramePack's
# slice bounds ``attention_mask[i, : effective_sequence_length[i]]`` are computed from the inputs alone: thunder
# specializes on them, see tests/test_value_guards.py.)
EXPECTED_ERRORS = {
    # the valid prompt tokens (torch.nonzero of the mask) decide a padding length: F.pad by ``total - (n + i0)`` (its
    # sign is decided by the mask's values, see tests/test_value_guards.py) gives a size thunder does not simplify
    # back to ``total``, and split_with_sizes by the static sizes is refused
    "mochi": (NotImplementedError, "split_with_sizes on inputs whose shapes hold extents known only at run time"),
    # inference's mixture of experts counts tokens per expert with .numpy()
    "hidream-infer": (DataDependentError, "Tensor.numpy"),
}
# z-image's rotary embedder computes its table on the first call and keeps it (a Python attribute): the second call
# compiles again, as it should
COMPILATIONS = {"z-image": 2}
# the FIR UNet diverges (to NaN, eagerly too) within three steps at the default learning rate
LEARNING_RATES = {"unet2d-skip-fir": 1e-3}


def _loss(out):
    if isinstance(out, torch.Tensor):
        return out.float().square().mean()
    if hasattr(out, "latent_dist"):  # an autoencoder's encoding
        return out.latent_dist.mean.square().mean()
    if hasattr(out, "to_tuple"):
        out = out.to_tuple()
    return sum(_loss(o) for o in out if isinstance(o, (torch.Tensor, tuple, list)))


@pytest.mark.parametrize("name", CASES)
def test_training_parity(name):
    _GEN.manual_seed(0)
    torch.manual_seed(0)
    model, inputs = CASES[name]()
    model.train()
    with torch.no_grad():  # Z-Image leaves its pad tokens uninitialized (torch.empty): NaN would fail every comparison
        for param_name, p in model.named_parameters():
            if param_name.endswith("pad_token"):
                p.normal_(generator=_GEN)
    if name in EXPECTED_ERRORS:
        error, match = EXPECTED_ERRORS[name]
        with pytest.raises(error, match=match):
            check_training_parity(model, inputs, loss_of=_loss, compilations=COMPILATIONS.get(name, 1),
                          lr=LEARNING_RATES.get(name, 0.1))
        return
    check_training_parity(model, inputs, loss_of=_loss, compilations=COMPILATIONS.get(name, 1),
                          lr=LEARNING_RATES.get(name, 0.1))
