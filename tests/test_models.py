"""Models: gradients, gate limits, masking, state carry, parameter counts, dropout masks.
The fused backend's agreement with the reference cells is tested in test_backends.py."""

import pytest
import torch

from rhnsearch.budget import count_params
from rhnsearch.models import ARCHS, build_model


def depth_for(arch, depth):
    return 1 if arch == "lstm" else depth


@pytest.mark.parametrize("arch", ARCHS)
def test_gradcheck_float64(arch):
    torch.manual_seed(0)  # a word model of 5 words: the layer reads 4 features a step
    model = build_model("ptb", arch, depth_for(arch, 3), 4, vocab_size=5, init_scale=0.5)
    model = model.double()
    x = torch.rand(3, 2, 4, dtype=torch.float64, requires_grad=True)
    ids = torch.randint(0, 5, (3, 2))
    layer = model.layer
    if arch == "lstm":
        state = tuple(
            torch.rand(1, 2, 4, dtype=torch.float64, requires_grad=True) for _ in range(2)
        )
        fn = lambda x, h, c: layer(x, (h, c))[0]  # noqa: E731
        assert torch.autograd.gradcheck(fn, (x, *state))
    else:
        s0 = torch.rand(2, 4, dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(lambda x, s: layer(x, s)[0], (x, s0))
    # and through the parameters
    params = [p for p in model.parameters()]
    out = lambda *ps: torch.func.functional_call(  # noqa: E731
        model, {n: p for (n, _), p in zip(model.named_parameters(), ps)}, (ids,)
    )[0]
    assert torch.autograd.gradcheck(out, tuple(p.detach().requires_grad_() for p in params))


def test_rhn_closed_transform_gates_carry_state():
    model = build_model("jsb", "rhn", 3, 8, t_bias=-1e4, init_scale=0.5)
    s0 = torch.randn(2, 8)
    out, state = model.layer(torch.rand(5, 2, 88), s0)
    assert torch.equal(state, s0)
    assert torch.equal(out, s0.expand(5, 2, 8))


def test_rhn_open_gates_change_state():
    """The carry test above can fail: with open gates the state moves."""
    model = build_model("jsb", "rhn", 3, 8, t_bias=4.0, init_scale=0.5)
    s0 = torch.randn(2, 8)
    _, state = model.layer(torch.rand(5, 2, 88), s0)
    assert (state - s0).abs().max() > 0.1


@pytest.mark.parametrize("arch", ARCHS)
def test_padding_does_not_change_jsb_loss(arch, jsb):
    torch.manual_seed(0)
    model = build_model("jsb", arch, depth_for(arch, 2), 16).eval()
    roll = jsb.train[0]
    x, y = roll[:-1].unsqueeze(1), roll[1:].unsqueeze(1)
    loss, n = model.loss_sum(model(x)[0], y, torch.ones(x.shape[:2]))
    pad = 7
    xp = torch.cat([x, torch.rand(pad, 1, 88)])
    yp = torch.cat([y, torch.ones(pad, 1, 88)])
    mask = torch.cat([torch.ones(x.shape[:2]), torch.zeros(pad, 1)])
    loss_p, n_p = model.loss_sum(model(xp)[0], yp, mask)
    assert n == n_p == len(roll) - 1
    torch.testing.assert_close(loss_p, loss)


@pytest.mark.parametrize("arch", ARCHS)
def test_state_carry_two_halves_equal_one_run(arch):
    torch.manual_seed(0)
    model = build_model("ptb", arch, depth_for(arch, 2), 12, vocab_size=50).eval()
    ids = torch.randint(0, 50, (10, 3))
    full, state = model(ids)
    first, mid = model(ids[:4])
    second, end = model(ids[4:], mid)
    torch.testing.assert_close(torch.cat([first, second]), full)
    for a, b in zip(
        state if isinstance(state, tuple) else (state,), end if isinstance(end, tuple) else (end,)
    ):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("task,tied", [("jsb", False), ("ptb", False), ("ptb", True)])
def test_param_count_matches_built_model(arch, task, tied):
    for depth in [1] if arch == "lstm" else [1, 2, 5]:
        model = build_model(task, arch, depth, 24, vocab_size=100, tied=tied)
        assert sum(p.numel() for p in model.parameters()) == count_params(
            task, arch, depth, 24, tied, 100
        )


def test_weight_tying_shares_the_embedding():
    model = build_model("ptb", "rhn", 2, 16, vocab_size=30, tied=True)
    assert model.head.weight is model.embedding.weight


@pytest.mark.parametrize("arch", ["rhn", "hsg", "dtrnn", "dtsrnn"])
def test_variational_masks_drawn_once_per_sequence(arch, monkeypatch):
    """One drop_i and one drop_h mask per forward call, whatever T and depth are."""
    import rhnsearch.models.dropout as dropout
    import rhnsearch.models.recurrent as target

    drawn = []

    def recording(p, shape, like, training):
        mask = dropout.variational_mask(p, shape, like, training)
        drawn.append((tuple(shape), mask))
        return mask

    monkeypatch.setattr(target, "variational_mask", recording)
    layer = build_model("jsb", arch, 3, 10, drop_i=0.3, drop_h=0.5).layer.train()
    layer(torch.rand(7, 2, 88))
    assert sorted(shape for shape, _ in drawn) == [(2, 10), (2, 88)]
    for shape, mask in drawn:
        keep = 0.5 if shape == (2, 10) else 0.7
        torch.testing.assert_close(mask.unique(), torch.tensor([0.0, 1 / keep]))


def test_dropout_off_in_eval_mode():
    torch.manual_seed(0)
    model = build_model(
        "ptb", "rhn", 2, 8, vocab_size=20, drop_x=0.5, drop_i=0.5, drop_h=0.5, drop_o=0.5
    ).eval()
    ids = torch.randint(0, 20, (5, 2))
    torch.testing.assert_close(model(ids)[0], model(ids)[0])


def test_embedding_dropout_drops_a_word_type_per_sequence():
    """drop_x keeps or drops each word type once per sequence (as the RHN authors' code): a
    word has one mask value at every step of its sequence, and sequences draw their own."""
    torch.manual_seed(0)
    model = build_model("ptb", "rhn", 1, 8, vocab_size=5, drop_x=0.5).train()
    ids = torch.tensor([[0, 1, 2, 0, 1, 2, 3]] * 64).t()  # (T, B): every sequence alike
    mask = (model.embed(ids) / model.embedding(ids))[..., 0]  # (T, B): 0 or 1 / keep
    torch.testing.assert_close(mask.unique(), torch.tensor([0.0, 2.0]))
    for word in range(4):
        at = ids[:, 0] == word
        assert (mask[at] == mask[at][0]).all()  # the same value at each of its steps
    assert len({tuple(mask[:, b].tolist()) for b in range(64)}) > 8  # per sequence


def test_variational_lstm_drops_its_state_with_one_mask_per_sequence(monkeypatch):
    """With drop_h the LSTM's state is dropped by one mask per sequence, the same at every
    step: with one sequence, dropping state units is zeroing (and rescaling) those columns of
    W_hh in nn.LSTM. Without a mask the step loop is nn.LSTM; in eval mode no mask is drawn."""
    import rhnsearch.models.dropout as dropout
    import rhnsearch.models.lstm as target

    torch.manual_seed(0)
    drawn = []

    def recording(p, shape, like, training):
        mask = dropout.variational_mask(p, shape, like, training)
        drawn.append((tuple(shape), mask))
        return mask

    monkeypatch.setattr(target, "variational_mask", recording)
    layer = build_model("jsb", "lstm", 1, 6, drop_i=0.3, drop_h=0.5, init_scale=0.5).layer
    x = torch.rand(9, 1, 88)
    outputs, _ = layer.train()(x)
    shapes = [shape for shape, _ in drawn]
    assert sorted(shapes) == [(1, 6), (1, 88)]  # one draw each per forward, whatever T is
    (mask_h,) = [m for shape, m in drawn if shape == (1, 6)]
    (mask_i,) = [m for shape, m in drawn if shape == (1, 88)]
    assert (mask_h == 0).any() and (mask_h > 0).any()
    reference = torch.nn.LSTM(88, 6)
    reference.load_state_dict(layer.lstm.state_dict())
    with torch.no_grad():
        reference.weight_hh_l0.mul_(mask_h)  # column j of W_hh reads unit j of h
    torch.testing.assert_close(outputs, reference(x * mask_i)[0])
    state = tuple(torch.rand(1, 3, 6) for _ in range(2))
    x3 = torch.rand(5, 3, 88)
    torch.testing.assert_close(layer.loop(x3, state, torch.ones(3, 6)), layer.lstm(x3, state))
    drawn.clear()
    layer.eval()(x)
    assert [m for _, m in drawn] == [None, None]


def test_variational_lstm_is_counted_and_sized_like_the_plain_one():
    from rhnsearch.budget import solve_width

    for drop_h in (0.0, 0.4):
        model = build_model("ptb", "lstm", 1, 33, vocab_size=50, tied=True, drop_h=drop_h)
        assert sum(p.numel() for p in model.parameters()) == count_params(
            "ptb", "lstm", 1, 33, True, 50
        )
    width = solve_width(300_000, "ptb", "lstm", 1, True, 1000)
    assert abs(count_params("ptb", "lstm", 1, width, True, 1000) - 300_000) < 0.01 * 300_000
