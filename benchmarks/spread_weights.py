"""Random weights for the parity benchmarks' models built with transformers' own classes (run
in the judge's venv, with torch): layer norms near 1, the rest of a size that keeps greedy
choices far apart, so that rounding cannot flip them."""


def spread_weights(model, torch) -> None:
    """Draws `model`'s parameters in place: layer norms 1 (weights) or 0 (biases) plus
    N(0, 0.1), every other parameter N(0, fan_in^-0.5)."""
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "layer_norm" in name:
                parameter.copy_(name.endswith("weight") + 0.1 * torch.randn_like(parameter))
            else:
                parameter.normal_(0, parameter.shape[-1] ** -0.5)
