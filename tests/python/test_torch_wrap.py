"""onyx.torch.wrap against PyTorch itself: outputs and every parameter's gradient equal torch
autograd's (float32, 1e-5 relative to the largest value), 100 AdamW steps give torch's loss
curve (1e-4 relative), state_dict round trips, modes, dynamic batch, shared parameters, and
clear errors for what cannot work."""
import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import onyx  # noqa: E402
import onyx.torch  # noqa: E402

torch.set_num_threads(1)


def rel_err(a, b, floor=1e-12):
    """max |a - b| / max |b|; `floor` bounds the denominator for values that are zero in exact
    arithmetic (a convolution bias under training-mode BatchNorm), where both sides hold
    rounding noise."""
    a = a.detach().double()
    b = b.detach().double()
    return float((a - b).abs().max() / max(float(b.abs().max()), floor))


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(12, 32)
        self.fc2 = torch.nn.Linear(32, 5)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


class CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.drop = torch.nn.Dropout(0.3)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        h = torch.relu(self.bn(self.conv(x)))
        h = torch.nn.functional.max_pool2d(h, 2).mean((2, 3))
        return self.fc(self.drop(h))


class Block(torch.nn.Module):
    """A Hugging Face-style decoder block in plain torch: pre-LayerNorm, causal attention
    with the reshapes torch.onnx writes as Shape/Gather/Concat subgraphs, GELU MLP."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1 = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.ln2 = torch.nn.LayerNorm(d)
        self.up = torch.nn.Linear(d, 4 * d)
        self.down = torch.nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-1, -2)) / (d // self.heads) ** 0.5
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.down(torch.nn.functional.gelu(self.up(self.ln2(x))))


class TinyGPT(torch.nn.Module):
    def __init__(self, vocab=50, d=32, t=16):
        super().__init__()
        self.wte = torch.nn.Embedding(vocab, d)
        self.wpe = torch.nn.Embedding(t, d)
        self.blocks = torch.nn.ModuleList([Block(d), Block(d)])
        self.ln_f = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, vocab)

    def forward(self, tokens):
        pos = torch.arange(tokens.shape[1])
        x = self.wte(tokens) + self.wpe(pos)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


def make(name, seed=0):
    torch.manual_seed(seed)
    if name == "mlp":
        return MLP(), (torch.randn(6, 12),), torch.randint(0, 5, (6,))
    if name == "cnn":
        return CNN(), (torch.randn(4, 3, 8, 8),), torch.randint(0, 4, (4,))
    model = TinyGPT()
    return model, (torch.randint(0, 50, (3, 16)),), torch.randint(0, 50, (3, 16))


def loss_of(out, labels):
    return torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), labels.reshape(-1))


@pytest.mark.parametrize("name", ["mlp", "cnn", "gpt"])
@pytest.mark.parametrize("mode", ["eval", "train"])
def test_outputs_and_gradients_equal_torch(name, mode):
    model, args, labels = make(name)
    if mode == "train" and name == "cnn":
        model.drop.p = 0.0  # onyx draws its own Dropout masks; BatchNorm trains on batch stats
    reference = copy.deepcopy(model)
    getattr(model, mode)()
    getattr(reference, mode)()
    wrapped = onyx.torch.wrap(model, args)
    assert wrapped.training == (mode == "train")

    out = wrapped(*args)
    want = reference(*args)
    assert rel_err(out, want) < 1e-5
    loss_of(out, labels).backward()
    loss_of(want, labels).backward()
    ref_params = dict(reference.named_parameters())
    largest = max(float(p.grad.abs().max()) for p in reference.parameters())
    for n, p in model.named_parameters():
        assert p.grad is not None, n
        assert rel_err(p.grad, ref_params[n].grad, floor=0.1 * largest) < 1e-5, n
    # BatchNorm's running statistics moved exactly as torch's did (train) or not at all (eval).
    ref_buffers = dict(reference.named_buffers())
    for n, b in model.named_buffers():
        assert torch.allclose(b.double(), ref_buffers[n].double(), rtol=1e-5, atol=1e-7), n


@pytest.mark.parametrize("name", ["mlp", "gpt"])
def test_bf16_wrap_tracks_torch_autocast(name):
    """precision="bf16": onyx's autocast next to torch.autocast("cpu", bfloat16) on the same
    module: outputs and gradients within bf16's error of torch's, everything torch sees float32."""
    model, args, labels = make(name)
    reference = copy.deepcopy(model)
    model.eval()
    reference.eval()
    wrapped = onyx.torch.wrap(model, args, precision="bf16")
    out = wrapped(*args)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = reference(*args)
    assert out.dtype == torch.float32
    assert rel_err(out, want.float()) < 3e-2
    loss_of(out, labels).backward()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref_loss = loss_of(reference(*args), labels)
    ref_loss.backward()
    ref_params = dict(reference.named_parameters())
    largest = max(float(p.grad.abs().max()) for p in reference.parameters())
    for n, p in model.named_parameters():
        assert p.grad is not None and p.grad.dtype == torch.float32, n
        assert rel_err(p.grad, ref_params[n].grad, floor=0.1 * largest) < 6e-2, n
    with pytest.raises(onyx.Error, match="expected fp32, bf16 or fp16"):
        onyx.torch.wrap(make(name)[0], args, precision="int8")


def test_input_gradients_flow_to_earlier_torch_layers():
    model, (x,), labels = make("mlp")
    pre = torch.nn.Linear(12, 12)
    ref_model, ref_pre = copy.deepcopy(model), copy.deepcopy(pre)
    wrapped = onyx.torch.wrap(model, (x,))
    loss_of(wrapped(pre(x)), labels).backward()
    loss_of(ref_model(ref_pre(x)), labels).backward()
    assert rel_err(pre.weight.grad, ref_pre.weight.grad) < 1e-5


@pytest.mark.parametrize("name", ["mlp", "cnn", "gpt"])
def test_adamw_trajectory_equals_torch(name):
    model, args, labels = make(name)
    if name == "cnn":
        model.drop.p = 0.0
    reference = copy.deepcopy(model)
    model.train()
    reference.train()
    wrapped = onyx.torch.wrap(model, args)
    opt = torch.optim.AdamW(wrapped.parameters(), lr=1e-3, weight_decay=0.01)
    ref_opt = torch.optim.AdamW(reference.parameters(), lr=1e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=30, gamma=0.5)
    ref_sched = torch.optim.lr_scheduler.StepLR(ref_opt, step_size=30, gamma=0.5)
    gen = torch.Generator().manual_seed(1)
    worst = 0.0
    for step in range(100):
        batch = [torch.randn(a.shape, generator=gen) if a.is_floating_point()
                 else torch.randint(0, 50, a.shape, generator=gen) for a in args]
        y = torch.randint(0, int(labels.max()) + 1, labels.shape, generator=gen)
        losses = []
        for m, o, s in ((wrapped, opt, sched), (reference, ref_opt, ref_sched)):
            o.zero_grad()
            loss = loss_of(m(*batch), y)
            loss.backward()
            o.step()
            s.step()
            losses.append(loss.item())
        worst = max(worst, abs(losses[0] - losses[1]) / abs(losses[1]))
    assert worst < 1e-4, f"worst relative loss difference {worst}"
    # The checkpoint loads into the unwrapped module and reproduces the wrapped outputs.
    fresh, _, _ = make(name, seed=5)
    fresh.load_state_dict(wrapped.state_dict())
    fresh.eval()
    wrapped.eval()
    with torch.no_grad():
        assert rel_err(wrapped(*args), fresh(*args)) < 1e-5


def test_parameters_are_shared_and_modes_switch():
    model, (x,), _ = make("cnn")
    wrapped = onyx.torch.wrap(model, (x,))
    assert [id(p) for p in wrapped.parameters()] == [id(p) for p in model.parameters()]
    assert list(wrapped.state_dict()) == list(model.state_dict())
    wrapped.eval()
    with torch.no_grad():
        before = wrapped(x)
        model.fc.bias.add_(1.0)  # an in-place update (what an optimizer does) is seen
        assert rel_err(wrapped(x), before + 1.0) < 1e-5
    # Training mode normalises with batch statistics: different outputs from eval mode.
    wrapped.train()
    model.drop.p = 0.0
    with torch.no_grad():
        tracked = int(model.bn.num_batches_tracked)
        train_out = wrapped(x)
        assert int(model.bn.num_batches_tracked) == tracked + 1
    assert rel_err(train_out, before + 1.0) > 1e-3


def test_dynamic_batch_and_no_grad():
    model, (tokens,), _ = make("gpt")
    wrapped = onyx.torch.wrap(model, (tokens,))
    wrapped.eval()
    for batch in (1, 5):
        t = torch.randint(0, 50, (batch, 16))
        with torch.no_grad():
            out = wrapped(t)
        assert out.shape == (batch, 16, 50)
        assert not out.requires_grad
        assert rel_err(out, model(t)) < 1e-5


def test_bad_inputs_raise_onyx_error_and_the_module_stays_usable():
    model, (x,), _ = make("mlp")
    wrapped = onyx.torch.wrap(model, (x,))
    with pytest.raises(onyx.Error, match="float"):
        wrapped(x.double())
    with pytest.raises(onyx.Error):
        wrapped(x.reshape(2, 3, 12))
    with pytest.raises(onyx.Error, match="expected 1 inputs"):
        wrapped(x, x)
    assert issubclass(onyx.Error, RuntimeError)
    assert rel_err(wrapped(x), model(x)) < 1e-5


def test_op_without_gradient_rule_is_named_before_training():
    class Det(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.eye(3) + 0.1 * torch.randn(3, 3))

        def forward(self, x):
            return torch.linalg.det(x @ self.w)

    with pytest.raises(onyx.Error, match="Det"):
        onyx.torch.wrap(Det(), (torch.randn(2, 3, 3),))


def test_module_that_cannot_be_exported():
    class Fft(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 8)

        def forward(self, x):
            return torch.fft.fft(self.fc(x)).abs()

    with pytest.raises(onyx.Error, match="export"):
        onyx.torch.wrap(Fft(), (torch.randn(2, 8),))
    with pytest.raises(onyx.Error, match="tensor"):
        onyx.torch.wrap(MLP(), ("not a tensor",))
    # A module that fails on its example inputs after a BatchNorm ran: named, and the running
    # statistics the failed probe moved are put back.
    class BnThenFail(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = torch.nn.BatchNorm1d(4)

        def forward(self, x):
            self.bn(x)
            raise ValueError("boom")

    bad = BnThenFail().train()
    with pytest.raises(onyx.Error, match="fails on example_inputs.*boom"):
        onyx.torch.wrap(bad, (torch.randn(8, 4) + 3.0,))
    assert torch.equal(bad.bn.running_mean, torch.zeros(4))
    assert int(bad.bn.num_batches_tracked) == 0
    # The process is fine: wrapping still works.
    model, (x,), _ = make("mlp")
    assert rel_err(onyx.torch.wrap(model, (x,))(x), model(x)) < 1e-5
