"""Hugging Face diffusers models train under thunder.jit exactly as in eager.

Tiny configurations of the UNets (2-D, conditional, 3-D, ControlNet, T2I-Adapter), autoencoders (KL, VQ, tiny, Wan's
causal 3-D one) and diffusion transformers (DiT, PixArt, SD3, Flux, Chroma, AuraFlow, Sana, Qwen-Image, Wan,
CogVideoX, LTX-Video, HunyuanVideo, Lumina 2, the Kandinsky prior) of diffusers 0.36; the loss is the mean square of
the outputs. One forward+backward and three SGD steps are compared with an eager deep copy (``tests/parity.py``).
"""

from __future__ import annotations

import pytest
import torch

from tests.parity import check_training_parity
from thunder.core.proxies import DataDependentError

D = pytest.importorskip("diffusers", reason="diffusers is not installed")

B = 2


def g(*shape):
    return torch.randn(*shape, generator=_GEN)


_GEN = torch.Generator()

CASES = {  # name -> () -> (model, inputs)
    "unet2d": lambda: (
        D.UNet2DModel(
            sample_size=16,
            in_channels=3,
            out_channels=3,
            layers_per_block=1,
            block_out_channels=(32, 64),
            down_block_types=("DownBlock2D", "AttnDownBlock2D"),
            up_block_types=("AttnUpBlock2D", "UpBlock2D"),
            norm_num_groups=8,
        ),
        dict(sample=g(B, 3, 16, 16), timestep=torch.tensor([3, 7])),
    ),
    "unet2d-cond": lambda: (
        D.UNet2DConditionModel(
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
        ),
        dict(sample=g(B, 4, 16, 16), timestep=torch.tensor([3, 7]), encoder_hidden_states=g(B, 5, 32)),
    ),
    "vae": lambda: (
        D.AutoencoderKL(
            in_channels=3,
            out_channels=3,
            down_block_types=("DownEncoderBlock2D",) * 2,
            up_block_types=("UpDecoderBlock2D",) * 2,
            block_out_channels=(32, 64),
            latent_channels=4,
            norm_num_groups=8,
            layers_per_block=1,
        ),
        dict(sample=g(B, 3, 16, 16)),
    ),
    "vq": lambda: (
        D.VQModel(
            in_channels=3,
            out_channels=3,
            down_block_types=("DownEncoderBlock2D",) * 2,
            up_block_types=("UpDecoderBlock2D",) * 2,
            block_out_channels=(32, 64),
            latent_channels=4,
            norm_num_groups=8,
            layers_per_block=1,
            num_vq_embeddings=16,
        ),
        dict(sample=g(B, 3, 16, 16)),
    ),
    "autoencoder-tiny": lambda: (
        D.AutoencoderTiny(
            encoder_block_out_channels=(16, 16),
            decoder_block_out_channels=(16, 16),
            num_encoder_blocks=(1, 1),
            num_decoder_blocks=(1, 1),
            latent_channels=4,
        ),
        dict(sample=g(B, 3, 16, 16)),
    ),
    "dit": lambda: (
        D.DiTTransformer2DModel(
            num_attention_heads=2,
            attention_head_dim=16,
            in_channels=4,
            out_channels=4,
            num_layers=2,
            sample_size=8,
            patch_size=2,
            num_embeds_ada_norm=10,
        ),
        dict(hidden_states=g(B, 4, 8, 8), timestep=torch.tensor([3, 7]), class_labels=torch.tensor([1, 2])),
    ),
    "pixart": lambda: (
        D.PixArtTransformer2DModel(
            num_attention_heads=2,
            attention_head_dim=16,
            in_channels=4,
            out_channels=8,
            num_layers=2,
            sample_size=8,
            patch_size=2,
            cross_attention_dim=32,
            caption_channels=32,
        ),
        dict(
            hidden_states=g(B, 4, 8, 8),
            timestep=torch.tensor([3, 7]),
            encoder_hidden_states=g(B, 5, 32),
            added_cond_kwargs={"resolution": None, "aspect_ratio": None},
        ),
    ),
    "sd3": lambda: (
        D.SD3Transformer2DModel(
            sample_size=8,
            patch_size=2,
            in_channels=4,
            num_layers=2,
            attention_head_dim=16,
            num_attention_heads=2,
            joint_attention_dim=32,
            caption_projection_dim=32,
            pooled_projection_dim=16,
            out_channels=4,
            pos_embed_max_size=16,
        ),
        dict(
            hidden_states=g(B, 4, 8, 8),
            encoder_hidden_states=g(B, 5, 32),
            pooled_projections=g(B, 16),
            timestep=torch.tensor([3, 7]),
        ),
    ),
    "flux": lambda: (
        D.FluxTransformer2DModel(
            patch_size=1,
            in_channels=16,
            num_layers=1,
            num_single_layers=1,
            attention_head_dim=16,
            num_attention_heads=2,
            joint_attention_dim=32,
            pooled_projection_dim=16,
            axes_dims_rope=(4, 6, 6),
        ),
        dict(
            hidden_states=g(B, 16, 16),
            encoder_hidden_states=g(B, 5, 32),
            pooled_projections=g(B, 16),
            timestep=torch.tensor([0.3, 0.7]),
            img_ids=torch.zeros(16, 3),
            txt_ids=torch.zeros(5, 3),
        ),
    ),
    "controlnet": lambda: (
        D.ControlNetModel(
            in_channels=4,
            layers_per_block=1,
            block_out_channels=(32, 64),
            down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
            cross_attention_dim=32,
            attention_head_dim=8,
            norm_num_groups=8,
            conditioning_embedding_out_channels=(16, 32),
        ),
        dict(
            sample=g(B, 4, 16, 16),
            timestep=torch.tensor([3, 7]),
            encoder_hidden_states=g(B, 5, 32),
            controlnet_cond=g(B, 3, 32, 32),
        ),
    ),
    "prior": lambda: (
        D.PriorTransformer(
            num_attention_heads=2,
            attention_head_dim=16,
            num_layers=2,
            embedding_dim=32,
            num_embeddings=5,
            additional_embeddings=4,
        ),
        dict(
            hidden_states=g(B, 32),
            timestep=torch.tensor([3, 7]),
            proj_embedding=g(B, 32),
            encoder_hidden_states=g(B, 5, 32),
        ),
    ),
    "t2i-adapter": lambda: (
        D.T2IAdapter(
            in_channels=3, channels=(32, 64), num_res_blocks=1, downscale_factor=4, adapter_type="full_adapter"
        ),
        dict(x=g(B, 3, 32, 32)),
    ),
    "wan": lambda: (
        D.WanTransformer3DModel(
            patch_size=(1, 2, 2),
            num_attention_heads=2,
            attention_head_dim=16,
            in_channels=4,
            out_channels=4,
            text_dim=32,
            freq_dim=32,
            ffn_dim=64,
            num_layers=2,
            rope_max_seq_len=32,
        ),
        dict(hidden_states=g(B, 4, 2, 8, 8), timestep=torch.tensor([3, 7]), encoder_hidden_states=g(B, 5, 32)),
    ),
    "cogvideox": lambda: (
        D.CogVideoXTransformer3DModel(
            num_attention_heads=2,
            attention_head_dim=16,
            in_channels=4,
            out_channels=4,
            time_embed_dim=32,
            text_embed_dim=32,
            num_layers=2,
            sample_width=8,
            sample_height=8,
            sample_frames=5,
            patch_size=2,
            max_text_seq_length=5,
            temporal_compression_ratio=4,
        ),
        dict(hidden_states=g(B, 2, 4, 8, 8), encoder_hidden_states=g(B, 5, 32), timestep=torch.tensor([3, 7])),
    ),
    "ltx": lambda: (
        D.LTXVideoTransformer3DModel(
            in_channels=8,
            out_channels=8,
            num_attention_heads=2,
            attention_head_dim=16,
            cross_attention_dim=32,
            num_layers=2,
            caption_channels=32,
        ),
        dict(
            hidden_states=g(B, 2 * 4 * 4, 8),
            encoder_hidden_states=g(B, 5, 32),
            timestep=torch.tensor([3, 7]),
            encoder_attention_mask=torch.ones(B, 5),
            num_frames=2,
            height=4,
            width=4,
        ),
    ),
    "hunyuan-video": lambda: (
        D.HunyuanVideoTransformer3DModel(
            in_channels=4,
            out_channels=4,
            num_attention_heads=2,
            attention_head_dim=16,
            num_layers=1,
            num_single_layers=1,
            num_refiner_layers=1,
            text_embed_dim=32,
            pooled_projection_dim=16,
            rope_axes_dim=(4, 6, 6),
        ),
        dict(
            hidden_states=g(B, 4, 1, 8, 8),
            timestep=torch.tensor([3, 7]),
            encoder_hidden_states=g(B, 5, 32),
            encoder_attention_mask=torch.ones(B, 5),
            pooled_projections=g(B, 16),
            guidance=torch.tensor([3.0, 3.0]),
        ),
    ),
    "sana": lambda: (
        D.SanaTransformer2DModel(
            in_channels=4,
            out_channels=4,
            num_attention_heads=2,
            attention_head_dim=16,
            num_layers=2,
            num_cross_attention_heads=2,
            cross_attention_head_dim=16,
            cross_attention_dim=32,
            caption_channels=32,
            sample_size=8,
        ),
        dict(hidden_states=g(B, 4, 8, 8), encoder_hidden_states=g(B, 5, 32), timestep=torch.tensor([3, 7])),
    ),
    "qwen-image": lambda: (
        D.QwenImageTransformer2DModel(
            patch_size=2,
            in_channels=16,
            out_channels=4,
            num_layers=2,
            attention_head_dim=16,
            num_attention_heads=2,
            joint_attention_dim=32,
            axes_dims_rope=(4, 6, 6),
        ),
        dict(
            hidden_states=g(B, 16, 16),
            encoder_hidden_states=g(B, 5, 32),
            encoder_hidden_states_mask=torch.ones(B, 5),
            timestep=torch.tensor([0.3, 0.7]),
            img_shapes=[(1, 4, 4)] * B,
            txt_seq_lens=[5, 5],
        ),
    ),
    "auraflow": lambda: (
        D.AuraFlowTransformer2DModel(
            sample_size=8,
            patch_size=2,
            in_channels=4,
            num_mmdit_layers=1,
            num_single_dit_layers=1,
            attention_head_dim=16,
            num_attention_heads=2,
            joint_attention_dim=32,
            caption_projection_dim=32,
            out_channels=4,
            pos_embed_max_size=64,
        ),
        dict(hidden_states=g(B, 4, 8, 8), encoder_hidden_states=g(B, 5, 32), timestep=torch.tensor([3, 7])),
    ),
    "unet3d": lambda: (
        D.UNet3DConditionModel(
            in_channels=4,
            out_channels=4,
            down_block_types=("CrossAttnDownBlock3D", "DownBlock3D"),
            up_block_types=("UpBlock3D", "CrossAttnUpBlock3D"),
            block_out_channels=(32, 64),
            layers_per_block=1,
            norm_num_groups=8,
            cross_attention_dim=32,
            attention_head_dim=8,
        ),
        dict(sample=g(B, 4, 2, 16, 16), timestep=torch.tensor([3, 7]), encoder_hidden_states=g(B, 5, 32)),
    ),
    "vae-wan": lambda: (
        D.AutoencoderKLWan(
            base_dim=16,
            z_dim=4,
            dim_mult=[1, 2],
            num_res_blocks=1,
            temperal_downsample=[True],
            latents_mean=[0.0] * 4,
            latents_std=[1.0] * 4,
        ),
        dict(sample=g(B, 3, 5, 16, 16)),
    ),
    "lumina2": lambda: (
        D.Lumina2Transformer2DModel(
            sample_size=8,
            patch_size=2,
            in_channels=4,
            hidden_size=32,
            num_layers=2,
            num_refiner_layers=1,
            num_attention_heads=2,
            num_kv_heads=1,
            multiple_of=16,
            axes_dim_rope=(4, 6, 6),
            axes_lens=(32, 32, 32),
            cap_feat_dim=32,
        ),
        dict(
            hidden_states=g(B, 4, 8, 8),
            timestep=torch.tensor([0.3, 0.7]),
            encoder_hidden_states=g(B, 5, 32),
            encoder_attention_mask=torch.ones(B, 5, dtype=torch.bool),
        ),
    ),
    "chroma": lambda: (
        D.ChromaTransformer2DModel(
            patch_size=1,
            in_channels=16,
            num_layers=1,
            num_single_layers=1,
            attention_head_dim=16,
            num_attention_heads=2,
            joint_attention_dim=32,
            axes_dims_rope=(4, 6, 6),
            approximator_num_channels=16,
            approximator_hidden_dim=32,
            approximator_layers=1,
        ),
        dict(
            hidden_states=g(B, 16, 16),
            encoder_hidden_states=g(B, 5, 32),
            timestep=torch.tensor([0.3, 0.7]),
            img_ids=torch.zeros(16, 3),
            txt_ids=torch.zeros(5, 3),
        ),
    ),
}

EXPECTED_ERRORS = {
    # the caption lengths are read as Python numbers: encoder_attention_mask.sum(dim=1).tolist()
    "lumina2": (DataDependentError, "Tensor.tolist")
}


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
    if name in EXPECTED_ERRORS:
        error, match = EXPECTED_ERRORS[name]
        with pytest.raises(error, match=match):
            check_training_parity(model, inputs, loss_of=_loss)
        return
    check_training_parity(model, inputs, loss_of=_loss)
