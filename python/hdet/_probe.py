"""probe_dataset: the probe signal's function built from a model and a dataset."""

import torch
import torch.nn.functional as F

from . import scheduler


def _cross_entropy(output, target):
    """F.cross_entropy, which wants the classes in dim 1; a sequence model's
    output with the classes last ((batch, time, vocab) against (batch, time)
    targets) is flattened to (batch * time, vocab) first."""
    torch_layout = output.shape[:1] + output.shape[2:] == target.shape
    if not torch_layout and output.dim() > 2 and output.shape[:-1] == target.shape:
        return F.cross_entropy(output.flatten(0, -2), target.flatten())
    return F.cross_entropy(output, target)


def probe_dataset(model, dataset, loss_fn=_cross_entropy, examples=1024, batch_size=256, seed=0):
    """Give hdet a probe on `examples` items of `dataset` (docs/design.md §1.1).

    One line after the model is built, e.g. probe_dataset(model, train_set).
    The items are drawn once with a fixed seed, so every rank probes the same
    ones (seed must be the same on every rank); each item is an (input,
    target) pair, as a TensorDataset or torchvision dataset gives. The probe
    evaluates model in eval mode without gradients, batch_size items at a
    time on the device of the model's first parameter, and returns the mean
    loss_fn(model(input), target) over the items (loss_fn returns a batch's
    mean, as torch's losses do by default). The default loss_fn is
    F.cross_entropy, also for a language model's (batch, time, vocab) logits
    against (batch, time) targets. Registered as hdet.probe(fn) does;
    returns fn. Outside hdet nothing is evaluated and the items are not
    read."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError("hdet.probe_dataset: model must be a torch.nn.Module, got %s" % type(model).__name__)
    if not callable(loss_fn):
        raise TypeError("hdet.probe_dataset: loss_fn %r is not callable" % (loss_fn,))
    for name, v in (("examples", examples), ("batch_size", batch_size)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError("hdet.probe_dataset: %s must be a positive int, got %r" % (name, v))
    try:
        n = len(dataset)
    except TypeError:
        raise TypeError("hdet.probe_dataset: dataset must have a length (a map-style dataset), got %s"
                        % type(dataset).__name__) from None
    if n == 0:
        raise ValueError("hdet.probe_dataset: the dataset is empty")
    picked = torch.randperm(n, generator=torch.Generator().manual_seed(seed))[:examples].tolist()
    batches = []

    def load():
        for i in range(0, len(picked), batch_size):
            items = [dataset[j] for j in picked[i:i + batch_size]]
            if not all(isinstance(it, (tuple, list)) and len(it) == 2 for it in items):
                raise TypeError("hdet.probe_dataset: dataset items must be (input, target) pairs")
            batches.append(torch.utils.data.default_collate(items))

    @torch.no_grad()
    def fn():
        if not batches:
            load()
        device = next(model.parameters()).device
        was_training = model.training
        model.eval()
        try:
            total = 0.0
            for x, y in batches:
                total += float(loss_fn(model(x.to(device)), y.to(device))) * len(y)
        finally:
            model.train(was_training)
        return total / len(picked)

    return scheduler.probe(fn)
