#!/usr/bin/env python3
"""Writes the torch-exported models, batches and PyTorch reference results that
tests/training/test_torch_trajectories.cpp compares onyx's training against.

Regenerate (needs torch, and onnxscript for the dynamo exports, see below; CI has neither, so
the outputs are checked in):

    pip install --no-deps --target /tmp/dynamo onnxscript onnx-ir
    PYTHONPATH=/tmp/dynamo .venv/bin/python tools/gen_torch_models.py --out tests/data/torch

Deterministic: every model and batch comes from a fixed seed, torch runs float32 on one
thread with deterministic algorithms, so a rerun with the same torch writes the same numbers.

Every model is exported with torch.onnx.export(..., opset_version=17, dynamo=False), the
TorchScript exporter, with a dynamic batch axis (and sequence axis for the sequence models),
so the graphs carry the Shape/Gather/Concat/Reshape spellings of view(), size() and arange().

Trajectory models (one folder each: model.onnx, x.npy or tokens.npy, labels.npy,
losses.json):

    mlp     x [B, 16] -> Linear(16, 32) -> ReLU -> Linear(32, 5)          logits [B, 5]
    cnn_bn  x [B, 1, 8, 8] -> Conv(1, 4, 3, pad 1) -> BatchNorm2d -> ReLU -> MaxPool(2)
            -> view(B, -1) -> Linear(64, 5)                               logits [B, 5]
            (exported with TrainingMode.TRAINING and no constant folding, so BatchNorm
            normalises with the batch statistics, as torch does in train())
    gpt2    tokens [B, T] -> token + position embedding -> 2 pre-LN blocks (causal
            self-attention with view/transpose/matmul/softmax and a registered tril mask
            buffer, tanh-GELU MLP) -> LayerNorm -> LM head              logits [B, T, 50]

The batch files hold NB = 10 distinct batches stacked on a leading axis (x.npy [10, B, ...],
labels.npy [10, B] or [10, B, T]); step s (0-based) uses batch s % 10, so 100 steps are 10
epochs over the same 10 batches. losses.json holds, for "sgd" (momentum 0.9, dampening 0,
no Nesterov, no weight decay) and "adamw" (betas 0.9/0.999, eps 1e-8, weight decay 0.01 on
every parameter, as torch.optim.AdamW does), the optimizer settings and the mean
cross-entropy torch computed at each of the 100 steps, before that step's update, starting
from the weights stored in model.onnx (for the LM the loss is over [B, T, V] logits and
[B, T] labels: onyx's class_axis -1).

Shape-coverage models (model.onnx, the inputs as <name>.npy, labels.npy, output.npy = torch's
forward output on that batch with the initial weights, meta.json = the input names and the
losses of 5 plain SGD steps, lr 0.1, on that one batch):

    encoder     tokens -> Embedding -> nn.TransformerEncoder(2 x nn.TransformerEncoderLayer,
                batch_first, dropout 0) -> Linear                         logits [B, S, 7]
    decoder     tgt [B, T, 16], memory [B, S, 16] -> nn.TransformerDecoderLayer with a causal
                tgt_mask built from T -> Linear                           logits [B, T, 7]
    mha         x [B, S, 16], key_padding_mask bool [B, S] -> nn.MultiheadAttention
                self-attention -> Linear                                  logits [B, S, 7]
    bert_block  input_ids, attention_mask int64 [B, S] -> embeddings + LayerNorm -> one
                Hugging Face-style BERT layer in plain torch (mask extended to [B, 1, 1, S]
                as (1 - mask) * -1e4, erf GELU, post-LN) -> Linear         logits [B, S, 7]
    llama_block input_ids int64 [B, S] -> Embedding -> one LLaMA-style layer as transformers
                writes it (float32 RMSNorm, rotary angles by torch.outer = Einsum, grouped-query
                attention, finfo.min causal mask, SiLU gate) -> RMSNorm -> Linear
                                                                          logits [B, S, 7]

All logits are trained with mean cross-entropy over the last axis against labels [B, S].

gpt2 and the shape-coverage models also get model_dynamo.onnx: the same model and weights
through the torch.export-based exporter (torch.onnx.export(..., dynamo=True)), which writes
other spellings (and 0-d float initializers for scalar constants). It needs onnxscript, which
is not a dependency of the project (hence the --target install above, which leaves the venv
alone). gpt2 also gets model_dynamo_unoptimized.onnx (optimize=False, as a user who wants the
graph to keep torch's parameter names exports it): torch.split there is SplitToSequence read by
SequenceAt, which training lowers to Slices.

losses.json and meta.json also hold "params": for each model file, the initializers that
hold torch's parameters (the dynamo exporter renames transposed Linear weights).
"""
import argparse
import copy
import json
import math
import os

import numpy as np
import onnx
import torch
import torch.nn as nn
import torch.nn.functional as F

OPSET = 17
STEPS = 100
COVERAGE_STEPS = 5
NUM_BATCHES = 10
VOCAB = 50
CLASSES = 5
SEQ_CLASSES = 7


# ---------------------------------------------------------------------------------------------
# Models


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, CLASSES)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class CnnBn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 4 * 4, CLASSES)

    def forward(self, x):
        h = F.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)
        return self.fc(h.view(h.size(0), -1))


class CausalSelfAttention(nn.Module):
    def __init__(self, dim, heads, context):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.c_proj = nn.Linear(dim, dim)
        self.register_buffer("bias", torch.tril(torch.ones(context, context)).view(1, 1, context, context))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class Gpt2Block(nn.Module):
    def __init__(self, dim, heads, context):
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads, context)
        self.ln_2 = nn.LayerNorm(dim)
        self.c_fc = nn.Linear(dim, 4 * dim)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * dim, dim)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.c_proj(self.gelu(self.c_fc(self.ln_2(x))))


class Gpt2(nn.Module):
    def __init__(self, vocab=VOCAB, dim=32, heads=2, layers=2, context=16):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(context, dim)
        self.h = nn.ModuleList([Gpt2Block(dim, heads, context) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens):
        T = tokens.size(1)
        pos = torch.arange(0, T, dtype=torch.long, device=tokens.device)
        x = self.wte(tokens) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


class Encoder(nn.Module):
    def __init__(self, dim=16):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, dim)
        layer = nn.TransformerEncoderLayer(dim, 2, dim_feedforward=32, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(dim, SEQ_CLASSES)

    def forward(self, tokens):
        return self.head(self.enc(self.emb(tokens)))


class Decoder(nn.Module):
    def __init__(self, dim=16):
        super().__init__()
        self.dec = nn.TransformerDecoderLayer(dim, 2, dim_feedforward=32, dropout=0.0, batch_first=True)
        self.head = nn.Linear(dim, SEQ_CLASSES)

    def forward(self, tgt, memory):
        T = tgt.size(1)
        mask = torch.triu(torch.full((T, T), float("-inf")), diagonal=1)
        return self.head(self.dec(tgt, memory, tgt_mask=mask))


class Mha(nn.Module):
    def __init__(self, dim=16):
        super().__init__()
        self.attn = nn.MultiheadAttention(dim, 2, dropout=0.0, batch_first=True)
        self.head = nn.Linear(dim, SEQ_CLASSES)

    def forward(self, x, key_padding_mask):
        y, _ = self.attn(x, x, x, key_padding_mask=key_padding_mask, need_weights=False)
        return self.head(y)


class BertSelfAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.num_attention_heads = heads
        self.attention_head_size = dim // heads
        self.all_head_size = dim
        self.query = nn.Linear(dim, dim)
        self.key = nn.Linear(dim, dim)
        self.value = nn.Linear(dim, dim)

    def transpose_for_scores(self, x):
        new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        return x.view(new_x_shape).permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask):
        q = self.transpose_for_scores(self.query(hidden_states))
        k = self.transpose_for_scores(self.key(hidden_states))
        v = self.transpose_for_scores(self.value(hidden_states))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.attention_head_size)
        probs = F.softmax(scores + attention_mask, dim=-1)
        context = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
        return context.view(context.size()[:-2] + (self.all_head_size,))


class BertLayer(nn.Module):
    def __init__(self, dim, heads, inter):
        super().__init__()
        self.self_attn = BertSelfAttention(dim, heads)
        self.attn_out = nn.Linear(dim, dim)
        self.attn_ln = nn.LayerNorm(dim, eps=1e-12)
        self.intermediate = nn.Linear(dim, inter)
        self.output = nn.Linear(inter, dim)
        self.out_ln = nn.LayerNorm(dim, eps=1e-12)

    def forward(self, hidden, mask):
        a = self.attn_ln(self.attn_out(self.self_attn(hidden, mask)) + hidden)
        return self.out_ln(self.output(F.gelu(self.intermediate(a))) + a)


class BertBlock(nn.Module):
    def __init__(self, dim=16, context=16):
        super().__init__()
        self.word_embeddings = nn.Embedding(VOCAB, dim)
        self.position_embeddings = nn.Embedding(context, dim)
        self.emb_ln = nn.LayerNorm(dim, eps=1e-12)
        self.layer = BertLayer(dim, 2, 32)
        self.head = nn.Linear(dim, SEQ_CLASSES)

    def forward(self, input_ids, attention_mask):
        S = input_ids.size(1)
        pos = torch.arange(S, dtype=torch.long, device=input_ids.device).unsqueeze(0)
        h = self.emb_ln(self.word_embeddings(input_ids) + self.position_embeddings(pos))
        ext = attention_mask[:, None, None, :].to(dtype=h.dtype)
        ext = (1.0 - ext) * -10000.0
        return self.head(self.layer(h, ext))


class LlamaRMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rotate_half(x):
    return torch.cat((-x[..., x.shape[-1] // 2:], x[..., : x.shape[-1] // 2]), dim=-1)


class LlamaBlock(nn.Module):
    """A LLaMA-style decoder layer as Hugging Face transformers writes it: RMSNorm in float32,
    rotary angles from torch.outer (which exports as Einsum), grouped-query attention (repeat_kv
    by expand + reshape), a finfo.min causal mask, a SiLU-gated MLP."""

    def __init__(self, dim=16, heads=4, kv_heads=2, inter=32):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.embed_tokens = nn.Embedding(VOCAB, dim)
        self.input_layernorm = LlamaRMSNorm(dim)
        self.q_proj = nn.Linear(dim, heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(dim, dim, bias=False)
        self.post_attention_layernorm = LlamaRMSNorm(dim)
        self.gate_proj = nn.Linear(dim, inter, bias=False)
        self.up_proj = nn.Linear(dim, inter, bias=False)
        self.down_proj = nn.Linear(inter, dim, bias=False)
        self.norm = LlamaRMSNorm(dim)
        self.head = nn.Linear(dim, SEQ_CLASSES, bias=False)
        inv_freq = 1.0 / (10000 ** (torch.arange(0, self.head_dim, 2).float() / self.head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, input_ids):
        B, S = input_ids.shape
        h = self.embed_tokens(input_ids)
        freqs = torch.outer(torch.arange(S, device=input_ids.device).float(), self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[None, None], emb.sin()[None, None]
        x = self.input_layernorm(h)
        q = self.q_proj(x).view(B, S, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, S, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, S, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        rep = self.heads // self.kv_heads
        k = k[:, :, None].expand(B, self.kv_heads, rep, S, self.head_dim).reshape(B, self.heads, S, self.head_dim)
        v = v[:, :, None].expand(B, self.kv_heads, rep, S, self.head_dim).reshape(B, self.heads, S, self.head_dim)
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim)
        mask = torch.full((S, S), torch.finfo(scores.dtype).min, device=input_ids.device).triu(1)
        probs = F.softmax(scores + mask, dim=-1, dtype=torch.float32).to(q.dtype)
        y = torch.matmul(probs, v).transpose(1, 2).reshape(B, S, -1)
        h = h + self.o_proj(y)
        x = self.post_attention_layernorm(h)
        h = h + self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        return self.head(self.norm(h))


def perturb_(model, gen):
    """Adds noise to every parameter: the exporter merges initializers with equal values
    (all-ones LayerNorm scales, the deep-copied layers of nn.TransformerEncoder), which would
    tie parameters that torch keeps apart."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_((0.05 if p.dim() == 1 else 0.02) * torch.randn(p.shape, generator=gen))


# ---------------------------------------------------------------------------------------------
# Export, data and reference runs


def export(model, args, names, dynamic, path, training=False):
    kw = dict(training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False) if training else {}
    state = copy.deepcopy(model.state_dict())  # tracing in training mode updates BN statistics
    torch.onnx.export(model, args, path, input_names=names, output_names=["logits"],
                      dynamic_axes=dynamic, opset_version=OPSET, dynamo=False, **kw)
    model.load_state_dict(state)
    return check_initializers(model, path)


def check_initializers(model, path):
    """Every torch parameter must be its own initializer (transposed copies allowed), so
    training the file starts from torch's weights with torch's parameter count. Returns the
    initializers that hold the parameters, sorted."""
    m = onnx.load(path)
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in m.graph.initializer}
    used = set()
    for name, p in model.named_parameters():
        a = p.detach().numpy()
        hit = [k for k, v in inits.items() if k not in used and v.dtype == np.float32 and
               ((v.shape == a.shape and np.array_equal(v, a)) or
                (v.ndim == 2 and v.shape == a.T.shape and np.array_equal(v, a.T)))]
        assert hit, f"{path}: parameter {name} has no initializer of its own"
        used.add(name if name in hit else hit[0])
    return sorted(used)


def export_dynamo(model, args, names, dynamic_shapes, path, optimize=True):
    """The same model through the torch.export-based exporter (needs onnxscript). It has no
    opset 17 translations of its own: it writes opset 18 and converts down with onnx's
    version converter. optimize=False keeps its graph as traced: torch.split as
    SplitToSequence + SequenceAt, the Linear weights' Transposes as nodes."""
    torch.onnx.export(model, args, path, input_names=names, output_names=["logits"],
                      dynamic_shapes=dynamic_shapes, opset_version=OPSET, dynamo=True,
                      external_data=False, verbose=False, optimize=optimize)
    return check_initializers(model, path)


def dynamo_dims(dynamic):
    """dynamic_axes names -> torch.export dims (sequence axes at most 16 long)."""
    dims = {}
    for input_name, axes in dynamic.items():
        if input_name != "logits":
            dims[input_name] = {a: torch.export.Dim(n, **({} if a == 0 else {"max": 16}))
                                for a, n in axes.items()}
    return dims


def export_both(model, args, names, dynamic, folder, training=False, dynamo=True, unoptimized=False):
    """model.onnx (TorchScript) and model_dynamo.onnx (and with `unoptimized`
    model_dynamo_unoptimized.onnx); {file: parameter initializers}."""
    params = {"model.onnx": export(model, args, names, dynamic, os.path.join(folder, "model.onnx"),
                                   training)}
    if dynamo:
        path = os.path.join(folder, "model_dynamo.onnx")
        params["model_dynamo.onnx"] = export_dynamo(model, args, names, dynamo_dims(dynamic), path)
    if dynamo and unoptimized:
        path = os.path.join(folder, "model_dynamo_unoptimized.onnx")
        params["model_dynamo_unoptimized.onnx"] = export_dynamo(model, args, names, dynamo_dims(dynamic),
                                                                path, optimize=False)
    return params


def cross_entropy(logits, labels):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


def reference_losses(model, batches, opt_name, opt_kw, steps=STEPS):
    """Trains a copy of `model` for `steps` steps over the batches in order; each step's loss."""
    m = copy.deepcopy(model)
    m.train()
    if opt_name == "sgd":
        opt = torch.optim.SGD(m.parameters(), **opt_kw)
    else:
        opt = torch.optim.AdamW(m.parameters(), **opt_kw)
    losses = []
    for s in range(steps):
        *inputs, labels = batches[s % len(batches)]
        opt.zero_grad()
        loss = cross_entropy(m(*inputs), labels)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def save_npy(folder, name, array):
    np.save(os.path.join(folder, name + ".npy"), np.ascontiguousarray(array))


def trajectory(out, name, model, inputs, labels, input_names, dynamic, sgd_lr, adamw_lr,
               training_export=False, dynamo=False, unoptimized=False):
    """inputs/labels: lists (one per input) of stacked batch tensors [NB, B, ...]."""
    folder = os.path.join(out, name)
    os.makedirs(folder, exist_ok=True)
    first = tuple(t[0] for t in inputs)
    params = export_both(model, first, input_names, dynamic, folder, training_export, dynamo, unoptimized)
    for n, t in zip(input_names, inputs):
        save_npy(folder, n, t.numpy())
    save_npy(folder, "labels", labels.numpy())
    batches = [tuple(t[i] for t in inputs) + (labels[i],) for i in range(NUM_BATCHES)]
    sgd = dict(lr=sgd_lr, momentum=0.9, dampening=0.0, nesterov=False, weight_decay=0.0)
    adamw = dict(lr=adamw_lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    result = {"steps": STEPS, "num_batches": NUM_BATCHES, "torch": torch.__version__,
              "params": params,
              "sgd": {"config": sgd, "losses": reference_losses(model, batches, "sgd", sgd)},
              "adamw": {"config": adamw, "losses": reference_losses(model, batches, "adamw", adamw)}}
    with open(os.path.join(folder, "losses.json"), "w") as f:
        json.dump(result, f, indent=1)
    for k in ("sgd", "adamw"):
        ls = result[k]["losses"]
        print(f"{name:8s} {k:5s} loss {ls[0]:.4f} -> {ls[-1]:.4f}")


def coverage(out, name, model, inputs, input_names, dynamic, labels):
    """One batch: the inputs, labels and torch's forward output with the exported weights."""
    folder = os.path.join(out, name)
    os.makedirs(folder, exist_ok=True)
    params = export_both(model, tuple(inputs), input_names, dynamic, folder)
    for n, t in zip(input_names, inputs):
        save_npy(folder, n, t.numpy())
    save_npy(folder, "labels", labels.numpy())
    model.eval()
    with torch.no_grad():
        y = model(*inputs)
    save_npy(folder, "output", y.numpy())
    sgd = dict(lr=0.1, momentum=0.0, weight_decay=0.0)
    losses = reference_losses(model, [tuple(inputs) + (labels,)], "sgd", sgd, steps=COVERAGE_STEPS)
    with open(os.path.join(folder, "meta.json"), "w") as f:
        json.dump({"inputs": input_names, "torch": torch.__version__, "params": params,
                   "sgd": {"config": sgd, "losses": losses}}, f, indent=1)
    print(f"{name:10s} output {tuple(y.shape)} sgd loss {losses[0]:.4f} -> {losses[-1]:.4f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/data/torch", help="folder for the model folders")
    ap.add_argument("--only", nargs="+", help="write these models alone (the others' files stay)")
    args = ap.parse_args()

    def want(name):
        return not args.only or name in args.only

    try:
        import onnxscript  # noqa: F401
    except ImportError:
        raise SystemExit("the dynamo exporter needs onnxscript: pip install --no-deps --target "
                         "/tmp/dynamo onnxscript onnx-ir, then rerun with PYTHONPATH=/tmp/dynamo")
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1234)
    B, T, S = 8, 8, 8
    batch_axis = {"logits": {0: "batch"}}

    # mlp: labels from a fixed random linear teacher, so there is something to learn.
    torch.manual_seed(1)
    model = Mlp()
    x = torch.randn(NUM_BATCHES, B, 16, generator=gen)
    teacher = torch.randn(16, CLASSES, generator=gen)
    y = (x @ teacher).argmax(-1)
    if want("mlp"):
        trajectory(args.out, "mlp", model, [x], y, ["x"], {"x": {0: "batch"}, **batch_axis},
                   sgd_lr=0.03, adamw_lr=1e-2)

    torch.manual_seed(2)
    model = CnnBn()
    perturb_(model, gen)
    x = torch.randn(NUM_BATCHES, B, 1, 8, 8, generator=gen)
    teacher = torch.randn(64, CLASSES, generator=gen)
    y = (x.reshape(NUM_BATCHES, B, 64) @ teacher).argmax(-1)
    if want("cnn_bn"):
        trajectory(args.out, "cnn_bn", model, [x], y, ["x"], {"x": {0: "batch"}, **batch_axis},
                   sgd_lr=0.02, adamw_lr=1e-2, training_export=True)

    # gpt2: next-token prediction on sequences that count up modulo the vocabulary.
    torch.manual_seed(3)
    model = Gpt2()
    perturb_(model, gen)
    start = torch.randint(0, VOCAB, (NUM_BATCHES, B, 1), generator=gen)
    step = torch.randint(1, 4, (NUM_BATCHES, B, 1), generator=gen)
    seq = (start + step * torch.arange(T + 1)) % VOCAB
    seq_axes = {0: "batch", 1: "seq"}
    tokens = seq[..., :-1].contiguous()
    if want("gpt2"):
        trajectory(args.out, "gpt2", model, [tokens], seq[..., 1:].contiguous(),
                   ["tokens"], {"tokens": seq_axes, "logits": seq_axes}, sgd_lr=0.1, adamw_lr=3e-3,
                   dynamo=True, unoptimized=True)

    # Shape coverage: one batch each.
    torch.manual_seed(4)
    model = Encoder()
    perturb_(model, gen)
    tokens = torch.randint(0, VOCAB, (B, S), generator=gen)
    if want("encoder"):
        coverage(args.out, "encoder", model, [tokens], ["tokens"],
                 {"tokens": seq_axes, "logits": seq_axes}, tokens % SEQ_CLASSES)

    torch.manual_seed(5)
    model = Decoder()
    perturb_(model, gen)
    tgt = torch.randn(B, T, 16, generator=gen)
    memory = torch.randn(B, S + 2, 16, generator=gen)
    labels = torch.randint(0, SEQ_CLASSES, (B, T), generator=gen)
    if want("decoder"):
        coverage(args.out, "decoder", model, [tgt, memory], ["tgt", "memory"],
                 {"tgt": seq_axes, "memory": {0: "batch", 1: "mem_seq"}, "logits": seq_axes}, labels)

    torch.manual_seed(6)
    model = Mha()
    perturb_(model, gen)
    x = torch.randn(B, S, 16, generator=gen)
    lengths = torch.randint(1, S + 1, (B, 1), generator=gen)
    pad = torch.arange(S)[None, :] >= lengths  # True: padding, never a whole row
    labels = torch.randint(0, SEQ_CLASSES, (B, S), generator=gen)
    if want("mha"):
        coverage(args.out, "mha", model, [x, pad], ["x", "key_padding_mask"],
                 {"x": seq_axes, "key_padding_mask": seq_axes, "logits": seq_axes}, labels)

    torch.manual_seed(7)
    model = BertBlock()
    perturb_(model, gen)
    ids = torch.randint(0, VOCAB, (B, S), generator=gen)
    mask = (torch.arange(S)[None, :] < lengths).to(torch.long)
    labels = torch.randint(0, SEQ_CLASSES, (B, S), generator=gen)
    if want("bert_block"):
        coverage(args.out, "bert_block", model, [ids, mask], ["input_ids", "attention_mask"],
                 {"input_ids": seq_axes, "attention_mask": seq_axes, "logits": seq_axes}, labels)

    # Its own generator, so that the models above keep their data when this one is added.
    lgen = torch.Generator().manual_seed(8)
    torch.manual_seed(8)
    model = LlamaBlock()
    perturb_(model, lgen)
    ids = torch.randint(0, VOCAB, (B, S), generator=lgen)
    labels = torch.randint(0, SEQ_CLASSES, (B, S), generator=lgen)
    if want("llama_block"):
        coverage(args.out, "llama_block", model, [ids], ["input_ids"],
                 {"input_ids": seq_axes, "logits": seq_axes}, labels)


if __name__ == "__main__":
    main()
