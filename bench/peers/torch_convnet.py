#!/usr/bin/env python3
"""PyTorch peer of syncfac's convnet_mnist_single: the seeds' ConvNet on Fashion-MNIST.

The model is examples/models/seeds_convnet.json (docs/models.md):
  conv 5x5, 16 filters, SAME, stride 1, ReLU -> max-pool 3x3 stride 2 SAME (28 -> 14)
  conv 5x5, 16 filters, SAME, stride 1, ReLU -> max-pool 3x3 stride 2 SAME (14 -> 7)
  flatten 7*7*16 = 784 -> dense 10; mean softmax cross-entropy.
Initialisation as syncfac's default `--init seeds`: conv kernels N(0, 0.01^2),
the dense weights N(0, 1), biases 0 (`--init glorot`: Xavier uniform weights).
Optimizers as syncfac's: momentum SGD (v = m v + g; w -= lr v, which is what
torch.optim.SGD with dampening 0 does), plain SGD, Adam.

The training step timed is the step a user of PyTorch writes: gather a batch
of a shuffled epoch, forward, loss, zero_grad, backward, optimizer step and
loss.item() (the sync point). Examples/s counts the steps after --warmup.

Pooling: TensorFlow's SAME 3x3/2 pool on 28 and 14 pads 0 before and 1 after
(what syncfac does). --pool_pad tf reproduces it (an explicit pad, an extra
pass over the activations); --pool_pad sym (the default) lets PyTorch pad 1
on both sides: the same output shapes and the same work, windows shifted by
one pixel, and PyTorch's fastest form, so the peer is not slowed by a copy
syncfac does not make.

Layout: --channels_last runs the model and the batch in NHWC (PyTorch's
channels-last memory format; syncfac computes in NHWC), the default NCHW.

Model: --model resnet20 trains examples/models/resnet20.json instead (He
et al.'s ResNet-20 for 28 x 28: a 3x3 stem, three stages of three basic
blocks of 16, 32 and 64 channels, batch norm after every convolution, 1x1
projections where a stage halves the image, global average pooling, dense
10; He init, biases as syncfac's). --compile runs the model through
torch.compile (PyTorch 2.x), its compilation inside the warm-up.

Runs with any torch from 1.13 on (Debian's python3-torch and PyTorch 2.x from
PyPI). Prints `examples_per_s N` and one `SUMMARY {json}` line, and appends
that JSON line to --summary_json when given (bench/run_peers.sh,
bench/run_vs_torch.sh and bench/run_isa_vs_torch.sh read it). Bad input
(a missing data file, a bad flag value) exits 2 naming the file or flag.
"""
import argparse
import json
import math
import resource
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import fashion_mnist  # bench/peers/, beside this script

DEFAULT_DATA_DIR = fashion_mnist.DEFAULT_DATA_DIR


class BadInput(Exception):
    """Input the peer cannot run on; the message names the file or flag."""


def load_split(data_dir, prefix):
    """Images [n, 1, 28, 28] as floats in [0, 1] and int64 labels of one split."""
    try:
        n, images, labels = fashion_mnist.read_split(data_dir, prefix)
    except fashion_mnist.BadData as e:
        raise BadInput(str(e)) from None
    images = torch.frombuffer(bytearray(images), dtype=torch.uint8).reshape(n, 28, 28)
    labels = torch.frombuffer(bytearray(labels), dtype=torch.uint8)
    # Scaled once here, not per batch: the cheapest form for PyTorch.
    return images.to(torch.float32).div_(255.0).unsqueeze(1).contiguous(), labels.to(torch.int64)


class TFSamePool(nn.Module):
    """3x3/2 max-pool with TensorFlow's SAME padding: 0 before, 1 after."""

    def __init__(self):
        super().__init__()
        self.pool = nn.MaxPool2d(3, 2)

    def forward(self, x):
        return self.pool(F.pad(x, (0, 1, 0, 1), value=float("-inf")))


def seeds_convnet(pool_pad, init):
    pool = (lambda: TFSamePool()) if pool_pad == "tf" else (lambda: nn.MaxPool2d(3, 2, padding=1))
    model = nn.Sequential(
        nn.Conv2d(1, 16, 5, padding=2), nn.ReLU(), pool(),
        nn.Conv2d(16, 16, 5, padding=2), nn.ReLU(), pool(),
        nn.Flatten(), nn.Linear(7 * 7 * 16, 10))
    for m in model:
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            if init == "glorot":
                nn.init.xavier_uniform_(m.weight)
            else:  # seeds: conv N(0, 0.01^2), dense N(0, 1)
                nn.init.normal_(m.weight, 0.0, 0.01 if isinstance(m, nn.Conv2d) else 1.0)
            nn.init.zeros_(m.bias)
    with torch.no_grad():  # 28 -> 14 -> 7, or the dense layer's 784 would not fit
        model(torch.zeros(2, 1, 28, 28))
    return model


class BasicBlock(nn.Module):
    """conv-bn-relu-conv-bn plus the shortcut (a 1x1 projection with its
    own batch norm where the shape changes), then relu: resnet20.json's
    blocks. Batch norm as syncfac's defaults there: momentum 0.99 in
    Keras's sense is PyTorch's 0.01, epsilon 1e-3."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1)
        self.bn1 = nn.BatchNorm2d(cout, eps=1e-3, momentum=0.01)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(cout, eps=1e-3, momentum=0.01)
        self.proj = None
        if stride != 1 or cin != cout:
            self.proj = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride),
                                      nn.BatchNorm2d(cout, eps=1e-3, momentum=0.01))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.proj is None else self.proj(x)))


def resnet20():
    layers = [nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16, eps=1e-3, momentum=0.01), nn.ReLU()]
    cin = 16
    for cout, stride in ((16, 1), (32, 2), (64, 2)):
        for block in range(3):
            layers.append(BasicBlock(cin, cout, stride if block == 0 else 1))
            cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)]
    model = nn.Sequential(*layers)
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
            nn.init.zeros_(m.bias)
    return model


def make_optimizer(args, params):
    if args.optimizer == "momentum":
        return torch.optim.SGD(params, lr=args.lr, momentum=args.momentum)
    if args.optimizer == "sgd":
        return torch.optim.SGD(params, lr=args.lr)
    return torch.optim.Adam(params, lr=args.lr)


@torch.no_grad()
def accuracy(model, images, labels, memory_format, batch=2000):
    model.eval()
    correct = 0
    for i in range(0, images.shape[0], batch):
        x = images[i:i + batch].contiguous(memory_format=memory_format)
        correct += (model(x).argmax(1) == labels[i:i + batch]).sum().item()
    model.train()
    return correct / images.shape[0]


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def positive(name):
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"--{name} {text!r} is not an integer")
        if value < 1:
            raise argparse.ArgumentTypeError(f"--{name} {value} must be at least 1")
        return value
    return parse


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--optimizer", choices=["momentum", "sgd", "adam"], default="momentum")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--batch", type=positive("batch"), default=128)
    p.add_argument("--steps", type=positive("steps"), default=220,
                   help="training steps, the warm-up included")
    p.add_argument("--warmup", type=int, default=20, help="first steps left out of examples/s")
    p.add_argument("--threads", type=positive("threads"), default=1,
                   help="PyTorch's intra-op threads (torch.set_num_threads)")
    p.add_argument("--channels_last", action="store_true", help="NHWC memory format")
    p.add_argument("--model", choices=["convnet", "resnet20"], default="convnet")
    p.add_argument("--compile", action="store_true", help="torch.compile the model (PyTorch 2.x)")
    p.add_argument("--pool_pad", choices=["sym", "tf"], default="sym")
    p.add_argument("--init", choices=["seeds", "glorot"], default="seeds")
    p.add_argument("--seed", type=int, default=0, help="initialisation and shuffling")
    p.add_argument("--eval_every", type=int, default=0,
                   help="test accuracy every N steps and at the end (0: never)")
    p.add_argument("--data_dir", default=DEFAULT_DATA_DIR)
    p.add_argument("--summary_json", default=None, help="append the summary as one JSON line")
    args = p.parse_args(argv)
    if not 0 <= args.warmup < args.steps:
        p.error(f"--warmup {args.warmup} must be at least 0 and below --steps {args.steps}")
    if args.eval_every < 0:
        p.error(f"--eval_every {args.eval_every} must be 0 or more")
    if not (args.lr > 0 and math.isfinite(args.lr)):
        p.error(f"--lr {args.lr} must be a positive finite number")
    return args


def train(args):
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    train_x, train_y = load_split(args.data_dir, "train")
    test_x, test_y = load_split(args.data_dir, "t10k") if args.eval_every else (None, None)
    if train_x.shape[0] < args.batch:
        raise BadInput(f"--batch {args.batch} is larger than the {train_x.shape[0]} training examples")
    memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
    model = resnet20() if args.model == "resnet20" else seeds_convnet(args.pool_pad, args.init)
    model = model.to(memory_format=memory_format)
    opt = make_optimizer(args, model.parameters())
    if args.compile:
        if not hasattr(torch, "compile"):
            raise BadInput(f"--compile needs PyTorch 2.x, this is {torch.__version__}")
        model = torch.compile(model)
    shuffle = torch.Generator().manual_seed(args.seed + 1)
    order, pos = torch.randperm(train_x.shape[0], generator=shuffle), 0
    losses, timed_s, accuracies = [], 0.0, []
    model.train()
    for step in range(1, args.steps + 1):
        t0 = time.perf_counter()
        if pos + args.batch > order.shape[0]:  # a new epoch, reshuffled
            order, pos = torch.randperm(train_x.shape[0], generator=shuffle), 0
        idx = order[pos:pos + args.batch]
        pos += args.batch
        x = train_x[idx].contiguous(memory_format=memory_format)
        loss = F.cross_entropy(model(x), train_y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        value = loss.item()
        if step > args.warmup:
            timed_s += time.perf_counter() - t0
        losses.append(value)
        if not math.isfinite(value):
            break
        if args.eval_every and (step % args.eval_every == 0 or step == args.steps):
            accuracies.append((step, accuracy(model, test_x, test_y, memory_format)))
            print(f"step {step} loss {value:.4f} test_accuracy {accuracies[-1][1]:.4f}", flush=True)
    timed_steps = len(losses) - args.warmup
    window = max(1, min(10, len(losses) // 2))
    return {
        "peer": "torch_convnet",
        "model": args.model,
        "compile": args.compile,
        "torch": torch.__version__,
        "threads": args.threads,
        "channels_last": args.channels_last,
        "pool_pad": args.pool_pad,
        "optimizer": args.optimizer,
        "lr": args.lr,
        "batch": args.batch,
        "seed": args.seed,
        "steps_run": len(losses),
        "timed_steps": timed_steps,
        "timed_s": round(timed_s, 4),
        "examples_per_s": round(timed_steps * args.batch / timed_s, 1) if timed_s > 0 else 0.0,
        # Mean training loss of the first and the last steps: that it falls
        # is what tells a trained model from a timed loop of no-ops.
        "first_loss": round(sum(losses[:window]) / window, 5),
        "last_loss": round(sum(losses[-window:]) / window, 5),
        "final_accuracy": accuracies[-1][1] if accuracies else None,
        "diverged": not math.isfinite(losses[-1]),
        "peak_rss_mib": round(peak_rss_mib(), 1),
    }


def main(argv=None):
    args = parse_args(argv)
    try:
        summary = train(args)
    except BadInput as e:
        print(f"torch_convnet: {e}", file=sys.stderr)
        return 2
    line = json.dumps(summary)
    print("SUMMARY " + line)
    print(f"examples_per_s {summary['examples_per_s']}")
    if args.summary_json:
        with open(args.summary_json, "a") as f:
            f.write(line + "\n")
    if summary["diverged"]:
        print(f"torch_convnet: the loss diverged at step {summary['steps_run']}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
