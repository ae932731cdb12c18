#!/usr/bin/env python3
"""Writes the benchmark models as torch.onnx exports them, into bench/models/<name>/.

bench/gen_bench_models.py writes its graphs by hand in the exporter's style; users bring what
the exporter itself writes (Shape/Gather/Unsqueeze/Concat chains for view(), the masks of
nn.TransformerEncoderLayer, decomposed LayerNorm at opset < 17, ...). These are the same five
shapes built from torch.nn modules and exported with torch.onnx.export (TorchScript
exporter, opset 17, dynamic batch axis, eval mode, constant folding on, as users call it):

    torch_mlp        784-1024-1024-1024-10: Linear + ReLU, Softmax
    torch_resnet18   torchvision's ResNet-18 (BasicBlock [2, 2, 2, 2]), 3x224x224
    torch_resnet50   torchvision's ResNet-50 (Bottleneck [3, 4, 6, 3], stride on the 3x3)
    torch_bert_base  token + position + type embeddings, LayerNorm, nn.TransformerEncoder of
                     12 nn.TransformerEncoderLayer (768, 12 heads, FFN 3072, gelu, post-LN,
                     batch_first) with src_key_padding_mask from attention_mask, seq 128
    torch_gpt2_small token + position embeddings, 12 pre-LN nn.TransformerEncoderLayer with a
                     causal float mask, final LayerNorm, LM head tied to the token embedding
                     (50257 tokens), seq 128

The ResNets are written out here (the same modules and order as torchvision.models) so the
benchmark needs no torchvision. Weights are torch's default initialisation under a fixed
seed. meta.json has the format of gen_bench_models.py. A model is rebuilt only when its
folder lacks a stamp matching VERSION.

Usage: gen_torch_bench_models.py [--out DIR] [--only NAME ...]   (needs torch)
"""
import json
import os
import shutil
import sys
import time

import onnx

VERSION = "torch-1"
OPSET = 17


def _nn():
    import torch
    import torch.nn as nn
    return torch, nn


def mlp():
    torch, nn = _nn()
    layers, width = [], 784
    for out in (1024, 1024, 1024):
        layers += [nn.Linear(width, out), nn.ReLU()]
        width = out
    model = nn.Sequential(*layers, nn.Linear(width, 10), nn.Softmax(dim=-1))
    return model, {"x": {"kind": "normal"}}, {"x": [1, 784]}, [1, 32]


def _resnet(block, counts):
    torch, nn = _nn()

    class BasicBlock(nn.Module):
        expansion = 1

        def __init__(self, cin, width, stride, down):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, width, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.conv2 = nn.Conv2d(width, width, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(width)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = down

        def forward(self, x):
            idt = x if self.downsample is None else self.downsample(x)
            y = self.relu(self.bn1(self.conv1(x)))
            return self.relu(self.bn2(self.conv2(y)) + idt)

    class Bottleneck(nn.Module):
        expansion = 4

        def __init__(self, cin, width, stride, down):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(width)
            self.conv3 = nn.Conv2d(width, width * 4, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(width * 4)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = down

        def forward(self, x):
            idt = x if self.downsample is None else self.downsample(x)
            y = self.relu(self.bn1(self.conv1(x)))
            y = self.relu(self.bn2(self.conv2(y)))
            return self.relu(self.bn3(self.conv3(y)) + idt)

    cls = BasicBlock if block == "basic" else Bottleneck

    class ResNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            cin, stages = 64, []
            for i, n in enumerate(counts):
                width, stride = 64 * 2 ** i, 1 if i == 0 else 2
                blocks = []
                for j in range(n):
                    s = stride if j == 0 else 1
                    down = None
                    if j == 0 and (s != 1 or cin != width * cls.expansion):
                        down = nn.Sequential(
                            nn.Conv2d(cin, width * cls.expansion, 1, s, bias=False),
                            nn.BatchNorm2d(width * cls.expansion))
                    blocks.append(cls(cin, width, s, down))
                    cin = width * cls.expansion
                stages.append(nn.Sequential(*blocks))
            self.layer1, self.layer2, self.layer3, self.layer4 = stages
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(cin, 1000)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    return ResNet()


def resnet18():
    return _resnet("basic", [2, 2, 2, 2]), {"x": {"kind": "normal"}}, \
        {"x": [1, 3, 224, 224]}, [1]


def resnet50():
    return _resnet("bottleneck", [3, 4, 6, 3]), {"x": {"kind": "normal"}}, \
        {"x": [1, 3, 224, 224]}, [1, 32]


SEQ, HIDDEN, HEADS, FFN, LAYERS = 128, 768, 12, 3072, 12


def bert_base():
    torch, nn = _nn()
    vocab = 30522

    class Bert(nn.Module):
        def __init__(self):
            super().__init__()
            self.word = nn.Embedding(vocab, HIDDEN)
            self.position = nn.Embedding(512, HIDDEN)
            self.token_type = nn.Embedding(2, HIDDEN)
            self.norm = nn.LayerNorm(HIDDEN, eps=1e-12)
            layer = nn.TransformerEncoderLayer(HIDDEN, HEADS, FFN, dropout=0.0,
                                               activation="gelu", batch_first=True,
                                               layer_norm_eps=1e-12)
            self.encoder = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)

        def forward(self, input_ids, attention_mask):
            pos = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
            h = self.word(input_ids) + self.position(pos) + \
                self.token_type(torch.zeros_like(input_ids))
            h = self.norm(h)
            return self.encoder(h, src_key_padding_mask=attention_mask == 0)

    feeds = {"input_ids": {"kind": "ids", "high": vocab}, "attention_mask": {"kind": "ones"}}
    return Bert(), feeds, {"input_ids": [1, SEQ], "attention_mask": [1, SEQ]}, [1]


def gpt2_module(vocab, hidden, heads, ffn, layers):
    """A GPT-2-style decoder: token + position embeddings, pre-LN nn.TransformerEncoderLayers
    under a causal mask, tied LM head (also torch_export_train_bench.py's, smaller)."""
    torch, nn = _nn()

    class Gpt2(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(vocab, hidden)
            self.wpe = nn.Embedding(1024, hidden)
            layer = nn.TransformerEncoderLayer(hidden, heads, ffn, dropout=0.0,
                                               activation="gelu", batch_first=True,
                                               norm_first=True)
            self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.ln_f = nn.LayerNorm(hidden)

        def forward(self, input_ids):
            t = input_ids.shape[1]
            pos = torch.arange(t, device=input_ids.device).unsqueeze(0)
            causal = torch.triu(torch.full((t, t), float("-inf")), diagonal=1)
            h = self.blocks(self.wte(input_ids) + self.wpe(pos), mask=causal)
            return self.ln_f(h) @ self.wte.weight.t()

    return Gpt2()


def gpt2_small():
    vocab = 50257
    model = gpt2_module(vocab, HIDDEN, HEADS, FFN, LAYERS)
    return model, {"input_ids": {"kind": "ids", "high": vocab}}, {"input_ids": [1, SEQ]}, [1]


MODELS = {"torch_mlp": mlp, "torch_resnet18": resnet18, "torch_resnet50": resnet50,
          "torch_bert_base": bert_base, "torch_gpt2_small": gpt2_small}


def distinct_layers(model):
    """nn.TransformerEncoder deep-copies one layer, and the exporter stores equal
    initializers once (Identity nodes): 12 layers would share one set of weights, which no
    trained model does and which flatters the cache. Each layer gets its own draw."""
    torch, nn = _nn()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".layers." in name:
                if p.dim() > 1:
                    nn.init.xavier_uniform_(p)
                else:
                    p.add_(0.02 * torch.randn_like(p))


def generate(out, name):
    """Exports `name` under `out` unless an up-to-date copy is there; True when built."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import gen_bench_models
    dst = os.path.join(out, name)
    stamp = os.path.join(dst, "meta.json")
    if gen_bench_models.up_to_date(dst, VERSION):
        return False
    torch, _ = _nn()
    t0 = time.time()
    torch.manual_seed(300 + list(MODELS).index(name))
    model, feeds, example_shapes, batches = MODELS[name]()
    distinct_layers(model)
    model.eval()
    names = list(example_shapes)
    example = []
    for n in names:
        kind = feeds[n]["kind"]
        shape = example_shapes[n]
        if kind == "normal":
            example.append(torch.randn(*shape))
        elif kind == "ids":
            example.append(torch.randint(0, feeds[n]["high"], shape))
        else:
            example.append(torch.ones(*shape, dtype=torch.int64))
    dynamic = {n: {0: "batch"} for n in names}
    dynamic["output"] = {0: "batch"}
    shutil.rmtree(dst, ignore_errors=True)
    os.makedirs(dst)
    path = os.path.join(dst, "model.onnx")
    # Not under no_grad: there nn.TransformerEncoderLayer takes its fused fast path
    # (aten::_transformer_encoder_layer_fwd), which the exporter cannot write.
    torch.onnx.export(model, tuple(example), path, input_names=names,
                      output_names=["output"], dynamic_axes=dynamic,
                      opset_version=OPSET, dynamo=False)
    m = onnx.load(path, load_external_data=False)
    params = sum(p.numel() for p in model.parameters())
    with open(stamp, "w") as f:
        json.dump({"version": VERSION, "feeds": feeds, "batches": batches, "inputs": names,
                   "params": params, "exporter": f"torch {torch.__version__} TorchScript"},
                  f, indent=1)
    print(f"  exported {name}: {len(m.graph.node)} nodes, {params / 1e6:.1f}M params "
          f"({time.time() - t0:.1f}s)", flush=True)
    return True


def main():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import gen_bench_models
    return gen_bench_models.cli(__doc__, MODELS, generate)


if __name__ == "__main__":
    sys.exit(main())
