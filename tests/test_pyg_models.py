"""PyTorch Geometric's graph layers, models, poolings, aggregations and norms under thunder.jit, as in eager.

Graph code is where extents known only at run time live: the number of edges after removing self loops, the
nodes a pooling keeps, segment pointers built from a batch vector, degrees counted with ``bincount``. Each case
is run on a sequence of graphs (new features; new edges and batch assignment with the same shapes; more nodes and
edges; three edges, so that most segments are empty; no edge at all), a forward and a backward with a random
cotangent, then an SGD step, on a jitted module and on an eager deep copy. Outputs, the input's and every
parameter's gradient and every buffer must be bitwise eager's.
"""
from __future__ import annotations

import copy

import pytest
import torch
from torch.nn import Linear, ReLU, Sequential

import thunder

pyg = pytest.importorskip("torch_geometric", reason="torch_geometric is not installed")
gnn = pytest.importorskip("torch_geometric.nn")
models = pytest.importorskip("torch_geometric.nn.models")
utils = pytest.importorskip("torch_geometric.utils")

FEATURES, OUT, EDGE_DIM = 16, 8, 4
# (seed, nodes, edges, nodes per graph of the batch)
GRAPHS = [(0, 12, 40, (5, 4, 3)), (1, 12, 40, (3, 6, 3)), (2, 15, 55, (4, 2, 5, 4)), (3, 12, 3, (5, 4, 3)),
          (4, 12, 0, (5, 4, 3))]


def _graph(seed, nodes, edges, sizes):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(nodes, FEATURES, generator=g)
    edge_index = torch.randint(0, nodes, (2, edges), generator=g)
    return x, {
        "edge_index": edge_index,
        "edge_attr": torch.randn(edges, EDGE_DIM, generator=g),
        "edge_weight": torch.rand(edges, generator=g),
        "batch": torch.cat([torch.full((s,), i) for i, s in enumerate(sizes)]),
    }


def _mlp(i, o):
    return Sequential(Linear(i, 32), ReLU(), Linear(32, o))


def _degrees():
    x, g = _graph(*GRAPHS[0])
    return torch.bincount(utils.degree(g["edge_index"][1], x.size(0), dtype=torch.long))


def _ptr(batch):
    return utils.cumsum(torch.bincount(batch))


class _Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def _edges(m, x, g):
    return m(x, g["edge_index"])


def _weighted(m, x, g):
    return m(x, g["edge_index"], g["edge_weight"])


def _attributed(m, x, g):
    return m(x, g["edge_index"], g["edge_attr"])


def _batched(m, x, g):
    return m(x, g["batch"])


# name -> (module builder, call, train mode)
CASES = {
    "GCNConv": (lambda: gnn.GCNConv(FEATURES, OUT), _edges, False),
    "GCNConv-edge-weight": (lambda: gnn.GCNConv(FEATURES, OUT), _weighted, False),
    "GraphConv-max": (lambda: gnn.GraphConv(FEATURES, OUT, aggr="max"), _weighted, False),
    "SAGEConv-normalized-projected": (lambda: gnn.SAGEConv(FEATURES, OUT, normalize=True, project=True), _edges, False),
    "GATConv-edge-attr": (lambda: gnn.GATConv(FEATURES, OUT, heads=2, edge_dim=EDGE_DIM), _attributed, False),
    "GATv2Conv": (lambda: gnn.GATv2Conv(FEATURES, OUT, heads=2), _edges, False),
    "GINEConv": (lambda: gnn.GINEConv(_mlp(FEATURES, FEATURES), edge_dim=EDGE_DIM), _attributed, False),
    "TransformerConv": (lambda: gnn.TransformerConv(FEATURES, OUT, heads=2, edge_dim=EDGE_DIM), _attributed, False),
    "ChebConv": (lambda: gnn.ChebConv(FEATURES, OUT, K=3), _weighted, False),
    "APPNP": (lambda: gnn.APPNP(K=3, alpha=0.1), _edges, False),
    "SGConv-cached": (lambda: gnn.SGConv(FEATURES, OUT, K=2, cached=True), _edges, False),
    "TAGConv": (lambda: gnn.TAGConv(FEATURES, OUT, K=3), _edges, False),
    "GENConv-softmax-learned": (lambda: gnn.GENConv(FEATURES, OUT, aggr="softmax", learn_t=True, msg_norm=True),
                                _edges, False),
    "EdgeConv-max": (lambda: gnn.EdgeConv(_mlp(2 * FEATURES, OUT), aggr="max"), _edges, False),
    "ResGatedGraphConv": (lambda: gnn.ResGatedGraphConv(FEATURES, OUT), _edges, False),
    "GatedGraphConv": (lambda: gnn.GatedGraphConv(FEATURES, num_layers=2), _edges, False),
    "FeaStConv": (lambda: gnn.FeaStConv(FEATURES, OUT, heads=2), _edges, False),
    "PNAConv": (lambda: gnn.PNAConv(FEATURES, OUT, aggregators=["mean", "min", "max", "std"],
                                    scalers=["identity", "amplification", "attenuation"], deg=_degrees()), _edges, False),
    "CGConv": (lambda: gnn.CGConv(FEATURES, dim=EDGE_DIM), _attributed, False),
    "NNConv": (lambda: gnn.NNConv(FEATURES, OUT, nn=Sequential(Linear(EDGE_DIM, FEATURES * OUT))), _attributed, False),
    "MixHopConv": (lambda: gnn.MixHopConv(FEATURES, OUT), _edges, False),
    "EGConv": (lambda: gnn.EGConv(FEATURES, OUT, aggregators=["sum", "mean", "max"], num_heads=2, num_bases=2),
               _edges, False),
    "GMMConv": (lambda: gnn.GMMConv(FEATURES, OUT, dim=EDGE_DIM, kernel_size=2), _attributed, False),
    "PointTransformerConv": (lambda: gnn.PointTransformerConv(FEATURES, OUT),
                             lambda m, x, g: m(x, x.detach()[:, :3], g["edge_index"]), False),
    # self loops removed then added, as many as the nodes, decided by the values (a guard)
    "ClusterGCNConv": (lambda: gnn.ClusterGCNConv(FEATURES, OUT), _edges, False),
    # to_dense_batch's mask selects as many rows as there are nodes: decided by the values (a guard)
    "GPSConv": (lambda: gnn.GPSConv(FEATURES, gnn.GCNConv(FEATURES, FEATURES), heads=2, dropout=0.0,
                                    attn_kwargs={"dropout": 0.0}), lambda m, x, g: m(x, g["edge_index"], g["batch"]),
                False),
    "RGCNConv": (lambda: gnn.RGCNConv(FEATURES, OUT, num_relations=3),
                 lambda m, x, g: m(x, g["edge_index"], g["edge_index"][0] % 3), False),
    "GCN-batch-norm-train": (lambda: models.GCN(FEATURES, 32, num_layers=2, out_channels=OUT, norm="batch_norm"),
                             _edges, True),
    "GAT-v2-jumping-knowledge": (lambda: models.GAT(FEATURES, 32, num_layers=2, out_channels=OUT, heads=2, v2=True,
                                                    jk="cat"), _edges, False),
    "GIN-jumping-knowledge-max": (lambda: models.GIN(FEATURES, 32, num_layers=3, out_channels=OUT, jk="max"),
                                  _edges, False),
    "AttentiveFP": (lambda: models.AttentiveFP(FEATURES, 32, OUT, edge_dim=EDGE_DIM, num_layers=2, num_timesteps=2),
                    lambda m, x, g: m(x, g["edge_index"], g["edge_attr"], g["batch"]), False),
    "global-mean-pool": (lambda: _Fn(gnn.global_mean_pool), _batched, False),
    "global-max-pool": (lambda: _Fn(gnn.global_max_pool), _batched, False),
    "TopKPooling": (lambda: gnn.TopKPooling(FEATURES, ratio=0.5),
                    lambda m, x, g: m(x, g["edge_index"], batch=g["batch"]), False),
    "SAGPooling": (lambda: gnn.SAGPooling(FEATURES, ratio=0.5),
                   lambda m, x, g: m(x, g["edge_index"], batch=g["batch"])[0], False),
    "MultiAggregation": (lambda: gnn.MultiAggregation(["mean", "max", "std"]), _batched, False),
    "SoftmaxAggregation-channels": (lambda: gnn.SoftmaxAggregation(t=1.0, learn=True, channels=FEATURES),
                                    _batched, False),
    "PowerMeanAggregation": (lambda: gnn.PowerMeanAggregation(learn=True), _batched, False),
    "MedianAggregation": (lambda: gnn.aggr.MedianAggregation(), _batched, False),
    "Set2Set": (lambda: gnn.aggr.Set2Set(FEATURES, processing_steps=2), _batched, False),
    "SortAggregation": (lambda: gnn.aggr.SortAggregation(k=3), _batched, False),
    "MeanAggregation-pointers": (lambda: gnn.MeanAggregation(), lambda m, x, g: m(x, ptr=_ptr(g["batch"])), False),
    "softmax-pointers": (lambda: _Fn(lambda x, b: utils.softmax(x, ptr=_ptr(b))), _batched, False),
    "BatchNorm-train": (lambda: gnn.BatchNorm(FEATURES), lambda m, x, g: m(x), True),
    "GraphNorm": (lambda: gnn.GraphNorm(FEATURES), _batched, False),
    "InstanceNorm-train": (lambda: gnn.InstanceNorm(FEATURES, affine=True), _batched, True),
    "PairNorm-individually": (lambda: gnn.PairNorm(scale_individually=True), _batched, False),
    "LayerNorm-graph": (lambda: gnn.LayerNorm(FEATURES, mode="graph"), _batched, False),
}


def _tensors(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _tensors(o)]
    return []


def _step(module, call, x, g, seed):
    """A forward and a backward with a random cotangent, then an SGD step: outputs, gradients, buffers."""
    x = x.clone().requires_grad_()
    for p in module.parameters():
        p.grad = None
    torch.manual_seed(seed)
    outs = _tensors(call(module, x, g))
    differentiable = [o for o in outs if o.requires_grad]
    gen = torch.Generator().manual_seed(seed)
    grads = {}
    if differentiable:
        sum((o * torch.randn(o.shape, generator=gen)).sum() for o in differentiable).backward()
        grads = {"input": x.grad, **{n: p.grad for n, p in module.named_parameters()}}
    with torch.no_grad():
        for p in module.parameters():
            if p.grad is not None:
                p -= 0.1 * p.grad
    buffers = {n: b.clone() for n, b in module.named_buffers()}
    return [o.detach() for o in outs], grads, buffers


def _same(actual, expected, what):
    if expected is None or actual is None:
        assert actual is None and expected is None, what
        return
    assert (actual.shape, actual.dtype) == (expected.shape, expected.dtype), what
    assert torch.equal(actual.nan_to_num(), expected.nan_to_num()) and torch.equal(actual.isnan(), expected.isnan()), (
        f"{what}: max abs diff {(actual.double() - expected.double()).abs().max().item():.3g}")


@pytest.mark.parametrize("name", list(CASES))
def test_pyg_module_matches_eager_on_graphs_of_every_size(name):
    build, call, train = CASES[name]
    torch.manual_seed(0)
    module = build().train(train)
    eager, jitted = copy.deepcopy(module), thunder.jit(copy.deepcopy(module))
    for k, graph in enumerate(GRAPHS):
        x, g = _graph(*graph)
        expected, actual = _step(eager, call, x, g, k), _step(jitted, call, x, g, k)
        assert len(actual[0]) == len(expected[0])
        for i, (a, e) in enumerate(zip(actual[0], expected[0])):
            _same(a, e, f"graph {k}: output {i}")
        assert actual[1].keys() == expected[1].keys(), k
        for n in expected[1]:
            _same(actual[1][n], expected[1][n], f"graph {k}: gradient of {n}")
        for n in expected[2]:
            _same(actual[2][n], expected[2][n], f"graph {k}: buffer {n}")


def test_message_passing_hooks_are_refused_not_skipped():
    """PyG runs a MessagePassing's propagate/message/aggregate hooks only when ``torch.compiler.is_compiling()`` is
    False, which it is not while thunder traces: they would be skipped silently (a hook that changes the output
    would give another result). Registered before the first call, or after it (the prologue checks that none is
    added), they are refused."""
    x, g = _graph(*GRAPHS[0])
    conv = gnn.GCNConv(FEATURES, OUT)
    handle = conv.register_propagate_forward_hook(lambda module, inputs, out: out * 2)
    with pytest.raises(NotImplementedError, match=r"_propagate_forward_hooks: PyTorch Geometric's MessagePassing"):
        thunder.jit(conv)(x, g["edge_index"])
    handle.remove()

    model = models.GCN(FEATURES, 32, num_layers=2, out_channels=OUT)
    jitted = thunder.jit(model)
    torch.testing.assert_close(jitted(x, g["edge_index"]), model(x, g["edge_index"]), rtol=0, atol=0)
    model.convs[1].register_message_forward_pre_hook(lambda module, inputs: inputs)
    with pytest.raises(NotImplementedError, match=r"convs.1._message_forward_pre_hooks"):
        jitted(x, g["edge_index"])
