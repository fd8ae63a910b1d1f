"""Train an MLP on MNIST with thunder (the seed's MNIST example).

Uses the real MNIST files if torchvision is installed and the data is available under
``--data`` (nothing is downloaded unless ``--download`` is given); otherwise a generated,
MNIST-shaped dataset (28x28 images of 10 learnable classes). Runs on CUDA when available.

    python examples/mnist_mlp.py [--device cpu|cuda] [--epochs 1] [--steps N]
"""
from __future__ import annotations

import argparse

import torch
import torch.nn as nn

import thunder


def mlp(in_channels: int, hidden_channels: list[int], dropout: float) -> nn.Sequential:
    """``torchvision.ops.MLP(in_channels, hidden_channels, bias=True, dropout=dropout)``, written out."""
    try:
        import torchvision

        return torchvision.ops.MLP(in_channels=in_channels, hidden_channels=hidden_channels, bias=True, dropout=dropout)
    except (ImportError, RuntimeError):  # not installed, or a build for another torch (its extension fails to load)
        layers, dim = [], in_channels
        for h in hidden_channels[:-1]:
            layers += [nn.Linear(dim, h, bias=True), nn.ReLU(), nn.Dropout(dropout)]
            dim = h
        layers += [nn.Linear(dim, hidden_channels[-1], bias=True), nn.Dropout(dropout)]
        return nn.Sequential(*layers)


class SyntheticMNIST(torch.utils.data.Dataset):
    """MNIST-shaped data: each class is a fixed random 28x28 template plus noise, flattened to 784."""

    def __init__(self, n: int, seed: int, device):
        g = torch.Generator().manual_seed(1234)
        templates = torch.rand(10, 784, generator=g)
        g = torch.Generator().manual_seed(seed)
        self.targets = torch.randint(0, 10, (n,), generator=g)
        self.data = (templates[self.targets] + 0.3 * torch.randn(n, 784, generator=g)).clamp(0, 1).to(device)
        self.targets = self.targets.to(device)

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, i):
        return self.data[i], self.targets[i]


def datasets(root: str, device, download: bool):
    try:
        import torchvision
        import torchvision.transforms as transforms

        device_transform = transforms.Lambda(lambda t: t.to(device))
        flatten_transform = transforms.Lambda(lambda t: t.flatten())
        my_transform = transforms.Compose((transforms.ToTensor(), device_transform, flatten_transform))
        train = torchvision.datasets.MNIST(f"{root}/train", train=True, download=download, transform=my_transform)
        test = torchvision.datasets.MNIST(f"{root}/test", train=False, download=download, transform=my_transform)
        print("Using the MNIST dataset from", root)
        return train, test
    except Exception as e:  # torchvision missing, or no files and no download
        print(f"MNIST files not available ({type(e).__name__}); using a generated MNIST-shaped dataset")
        return SyntheticMNIST(4096, 0, device), SyntheticMNIST(1024, 1, device)


def eval_model(model, test_loader, batch_size, device):
    num_correct = 0
    total_guesses = 0
    for data, targets in iter(test_loader):
        targets = targets.to(device)
        results = model(data)
        best_guesses = torch.argmax(results, 1)
        num_correct += torch.eq(targets, best_guesses).sum().item()
        total_guesses += batch_size
    print("Correctly guessed ", (num_correct / total_guesses) * 100, "% of the dataset")


def train_model(model, train_loader, device, *, num_epochs: int = 1, max_steps: int | None = None):
    loss_fn = torch.nn.CrossEntropyLoss().to(device)
    optimizer = torch.optim.Adam(model.parameters())
    step = 0
    for epoch in range(num_epochs):
        for data, targets in iter(train_loader):
            targets = targets.to(device)
            results = model(data)
            loss = loss_fn(results, targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            if max_steps is not None and step >= max_steps:
                return


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--steps", type=int, default=None, help="stop training after this many steps")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--data", default="/tmp/mnist")
    parser.add_argument("--download", action="store_true")
    args = parser.parse_args()
    device = torch.device(args.device)

    train_dataset, test_dataset = datasets(args.data, device, args.download)
    train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=args.batch_size,
                                               sampler=torch.utils.data.RandomSampler(train_dataset))
    test_loader = torch.utils.data.DataLoader(test_dataset, batch_size=args.batch_size,
                                              sampler=torch.utils.data.RandomSampler(test_dataset))

    model = mlp(784, [784, 784, 784, 28, 10], dropout=0.1).to(device)

    # Performs an initial evaluation
    model.eval().requires_grad_(False)
    jitted_eval_model = thunder.jit(model)
    eval_model(jitted_eval_model, test_loader, args.batch_size, device)

    # Trains the model
    model.train().requires_grad_(True)
    jitted_train_model = thunder.jit(model)
    train_model(jitted_train_model, train_loader, device, num_epochs=args.epochs, max_steps=args.steps)

    model.eval().requires_grad_(False)
    # Performs a final evaluation
    eval_model(jitted_eval_model, test_loader, args.batch_size, device)
    # The unjitted and jitted model share parameters, so it's also updated
    eval_model(model, test_loader, args.batch_size, device)

    fwd_traces = thunder.last_traces(jitted_train_model)
    bwd_traces = thunder.last_backward_traces(jitted_train_model)
    eval_traces = thunder.last_traces(jitted_eval_model)

    print("This is the trace that thunder executed for training's forward computation:")
    print(fwd_traces[-1])
    print("This is the trace that thunder executed for training's backward computation:")
    print(bwd_traces[-1])
    print("This is the trace that thunder executed for eval's computation:")
    print(eval_traces[-1])


if __name__ == "__main__":
    main()
