"""torch-lr-finder's range test as both peer scripts run it (bench/peers)."""


def suggest(model, opt, criterion, loader):
    """The range test (1e-7 to 10, 100 exponential steps) and its
    steepest-descent suggestion, with the steps it took; the model and the
    optimizer come back in their initial state."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from torch_lr_finder import LRFinder

    finder = LRFinder(model, opt, criterion, device="cpu")
    finder.range_test(loader, start_lr=1e-7, end_lr=10, num_iter=100, step_mode="exp")
    steps = len(finder.history["lr"])
    _, suggestion = finder.plot(suggest_lr=True)
    plt.close("all")
    finder.reset()
    return suggestion, steps
