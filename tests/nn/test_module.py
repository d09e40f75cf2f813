"""Module mechanics: registration, traversal order, state_dict, strict loading, modes, repr,
dtype conversion and seeded reproducibility."""

from __future__ import annotations

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(np.ones(3, dtype=np.float32))
        self.fc = nn.Linear(3, 3)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.fc(x * self.scale))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = nn.Linear(4, 3, bias=False)
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Sequential(nn.ReLU(), nn.Linear(3, 1))

    def forward(self, x):
        x = self.first(x)
        for b in self.blocks:
            x = b(x)
        return self.head(x)


NAMES = [
    "first.weight",
    "blocks.0.scale",
    "blocks.0.fc.weight",
    "blocks.0.fc.bias",
    "blocks.1.scale",
    "blocks.1.fc.weight",
    "blocks.1.fc.bias",
    "head.1.weight",
    "head.1.bias",
]


def test_parameter_is_a_leaf_tensor_that_owns_a_copy():
    a = np.zeros(3, dtype=np.float32)
    p = nn.Parameter(a)
    assert isinstance(p, tg.Tensor) and p.requires_grad and p.is_leaf
    p.data[0] = 5
    assert a[0] == 0
    assert nn.Parameter([1, 2]).dtype == np.float32
    assert nn.Parameter(np.zeros(2)).dtype == np.float64
    with pytest.raises(TypeError, match="floating point"):
        nn.Parameter(np.arange(3))
    (p * 2).sum().backward()
    np.testing.assert_array_equal(p.grad, [2, 2, 2])


def test_named_parameters_order_and_dotted_names():
    net = Net()
    assert [n for n, _ in net.named_parameters()] == NAMES
    assert [p for p in net.parameters()] == [p for _, p in net.named_parameters()]
    assert net.num_parameters() == 12 + 2 * (3 + 9 + 3) + 4
    assert [type(c).__name__ for c in net.children()] == ["Linear", "ModuleList", "Sequential"]
    kinds = [type(m).__name__ for m in net.modules()]
    assert kinds[:4] == ["Net", "Linear", "ModuleList", "Block"]
    assert len(kinds) == 1 + 1 + 1 + 2 * 3 + 3


def test_shared_parameter_listed_once_and_reassignment_updates_registry():
    net = Net()
    net.blocks[1].fc = net.blocks[0].fc  # weight tying
    names = [n for n, _ in net.named_parameters()]
    assert "blocks.1.fc.weight" not in names and "blocks.0.fc.weight" in names
    net.first = nn.Identity()
    assert "first.weight" not in [n for n, _ in net.named_parameters()]
    lin = nn.Linear(2, 2)
    lin.bias = None
    assert [n for n, _ in lin.named_parameters()] == ["weight"]
    with pytest.raises(TypeError, match="parameter .weight"):
        lin.weight = np.zeros((2, 2))


def test_forgetting_super_init_is_a_clear_error():
    class Bad(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(np.zeros(2))

    with pytest.raises(AttributeError, match="super"):
        Bad()


def test_state_dict_round_trip_copies_in_place():
    a, b = Net(), Net()
    sd = a.state_dict()
    assert list(sd) == NAMES
    assert all(isinstance(v, np.ndarray) for v in sd.values())
    sd["first.weight"][0, 0] = 123.0  # a copy: the model is unchanged
    assert a.first.weight.data[0, 0] != 123.0
    held = b.first.weight.data  # e.g. an optimiser's reference
    res = b.load_state_dict(a.state_dict())
    assert res.missing_keys == [] and res.unexpected_keys == []
    assert b.first.weight.data is held
    for (n, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters()):
        np.testing.assert_array_equal(pa.data, pb.data, err_msg=n)
    x = tg.tensor(np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32))
    a.eval(), b.eval()
    np.testing.assert_array_equal(a(x).data, b(x).data)


def test_strict_load_lists_every_problem_and_leaves_model_untouched():
    net = Net()
    before = net.state_dict()
    sd = net.state_dict()
    del sd["head.1.bias"]
    sd["extra.weight"] = np.zeros(1, dtype=np.float32)
    sd["first.weight"] = np.zeros((4, 3), dtype=np.float32)  # transposed shape
    sd["blocks.0.scale"] = np.zeros(3, dtype=np.float64)  # wrong dtype
    sd["blocks.1.scale"] = np.full(3, 7.0, dtype=np.float32)  # fine on its own
    with pytest.raises(nn.StateDictError) as e:
        net.load_state_dict(sd)
    msg = str(e.value)
    for part in [
        "head.1.bias",
        "extra.weight",
        "first.weight",
        "(4, 3)",
        "blocks.0.scale",
        "float64",
        "4 problem",
    ]:
        assert part in msg, part
    for n, v in net.state_dict().items():
        np.testing.assert_array_equal(v, before[n], err_msg=n)


def test_non_strict_load_skips_missing_and_unexpected_but_not_mismatches():
    net = Net()
    sd = {"first.weight": np.ones((3, 4), np.float32), "nope": np.zeros(2)}
    res = net.load_state_dict(sd, strict=False)
    assert res.unexpected_keys == ["nope"] and "head.1.bias" in res.missing_keys
    np.testing.assert_array_equal(net.first.weight.data, 1.0)
    with pytest.raises(nn.StateDictError, match="shape"):
        net.load_state_dict({"first.weight": np.ones((4, 3), np.float32)}, strict=False)


def test_load_accepts_tensors_and_torch_tensors():
    import torch

    lin = nn.Linear(3, 2)
    lin.load_state_dict({"weight": torch.ones(2, 3), "bias": tg.tensor([1.0, 2.0])})
    np.testing.assert_array_equal(lin.weight.data, 1.0)
    np.testing.assert_array_equal(lin.bias.data, [1.0, 2.0])


def test_train_eval_propagate_and_control_dropout():
    net = Net()
    assert all(m.training for m in net.modules())
    assert net.eval() is net
    assert not any(m.training for m in net.modules())
    x = tg.tensor(np.ones((64, 3), np.float32))
    blk = net.blocks[0]
    np.testing.assert_array_equal(blk(x).data, blk.fc(x).data)
    net.train()
    assert all(m.training for m in net.modules())
    assert np.any(blk(x).data != blk.fc(x).data)


def test_zero_grad_and_requires_grad_():
    net = Net()
    x = tg.tensor(np.ones((2, 4), np.float32))
    net(x).sum().backward()
    assert net.first.weight.grad is not None
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())
    net.requires_grad_(False)
    assert not net(x).requires_grad


def test_trainable_parameters_leave_frozen_out():
    from tapegrad import optim

    model = nn.Sequential(
        nn.Embedding.from_pretrained(np.ones((4, 2), np.float32)), nn.Linear(2, 1)
    )
    assert len(list(model.parameters())) == 3
    trainable = model.trainable_parameters()
    assert trainable == [model[1].weight, model[1].bias]
    opt = optim.SGD(trainable, lr=0.1)
    model(np.array([[0, 3]])).sum().backward()
    opt.step()
    np.testing.assert_array_equal(model[0].weight.data, 1.0)


def test_call_runs_forward_and_base_forward_is_abstract():
    with pytest.raises(NotImplementedError, match="Module"):
        nn.Module()(1)


def test_repr_is_nested_and_readable():
    net = Net()
    r = repr(net)
    assert r.startswith("Net(\n  (first): Linear(in_features=4, out_features=3, bias=False)")
    assert "  (blocks): ModuleList(\n    (0): Block(\n      (fc): Linear(" in r
    assert "(drop): Dropout(p=0.5)" in r
    assert "(head): Sequential(\n    (0): ReLU()\n    (1): Linear(" in r
    assert repr(nn.ReLU()) == "ReLU()"
    assert "Conv2d(1, 6, kernel_size=(3, 3), stride=(1, 1), padding=(0, 0), bias=False)" == repr(
        nn.Conv2d(1, 6, 3, bias=False)
    )


def test_sequential_container_protocol():
    layers = [nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 1)]
    seq = nn.Sequential(*layers)
    assert len(seq) == 3 and seq[0] is layers[0] and seq[-1] is layers[2]
    assert list(seq) == layers
    sub = seq[1:]
    assert isinstance(sub, nn.Sequential) and len(sub) == 2 and sub[0] is layers[1]
    seq.append(nn.Sigmoid())
    assert len(seq) == 4 and [n for n, _ in seq.named_parameters()][-1] == "2.bias"
    x = tg.tensor(np.ones((4, 2), np.float32))
    manual = layers[2](layers[1](layers[0](x))).sigmoid()
    np.testing.assert_array_equal(seq(x).data, manual.data)
    with pytest.raises(TypeError, match="item 1"):
        nn.Sequential(nn.ReLU(), lambda x: x)


def test_module_list_insert_delete_reindexes():
    ml = nn.ModuleList([nn.Linear(1, 1), nn.Linear(1, 2)])
    ml.insert(0, nn.Linear(1, 3))
    assert [m.out_features for m in ml] == [3, 1, 2]
    assert [n for n, _ in ml.named_parameters()][::2] == ["0.weight", "1.weight", "2.weight"]
    del ml[1]
    assert [m.out_features for m in ml] == [3, 2] and len(ml) == 2
    ml[1] = nn.Linear(1, 5)
    assert ml[1].out_features == 5 and ml._modules["1"] is ml[1]


def test_to_double_converts_parameters_in_place():
    lin = nn.Linear(3, 2)
    w = lin.weight
    lin.double()
    assert lin.weight is w and w.dtype == np.float64 and lin.bias.dtype == np.float64
    out = lin(tg.tensor(np.ones((1, 3))))
    assert out.dtype == np.float64
    with pytest.raises(tg.DTypeError):
        lin(tg.tensor(np.ones((1, 3), np.float32)))


def _build():
    return nn.Sequential(
        nn.Linear(5, 4), nn.Dropout(0.3), nn.RNN(4, 3), nn.Embedding(7, 2), nn.LSTM(2, 3)
    )


def test_manual_seed_reproduces_model_and_dropout_masks():
    nn.init.manual_seed(42)
    a = _build()
    nn.init.manual_seed(42)
    b = _build()
    c = _build()  # continues the stream: different
    for (n, pa), (_, pb), (_, pc) in zip(
        a.named_parameters(), b.named_parameters(), c.named_parameters()
    ):
        np.testing.assert_array_equal(pa.data, pb.data, err_msg=n)
        if "weight" in n:
            assert not np.array_equal(pa.data, pc.data), n
    x = tg.tensor(np.ones((8, 5), np.float32))
    np.testing.assert_array_equal(a[1](x).data, b[1](x).data)
    assert tg.nn.manual_seed is nn.init.manual_seed


def test_explicit_rng_overrides_default_generator():
    w1 = nn.Linear(3, 3, rng=np.random.default_rng(1)).weight.data
    nn.init.manual_seed(99)
    w2 = nn.Linear(3, 3, rng=np.random.default_rng(1)).weight.data
    np.testing.assert_array_equal(w1, w2)
