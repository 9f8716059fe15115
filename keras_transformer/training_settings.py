"""How a model is trained (section 5): the settings that are not part of the architecture."""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class TrainingSettings:
    """Label smoothing eps_ls (5.4), the learning-rate schedule of eq. (3) (`warmup_steps`,
    and `learning_rate_scale` multiplying it), the tokens per side of one global batch (5.1:
    about 25,000) and how many of the last checkpoints the run's result averages (6.1: 5 for
    base, 20 for big; 0 or 1: none). None of them changes the weights' shapes, so a trained
    model loads without them.
    """

    label_smoothing: float = 0.1
    warmup_steps: int = 4000
    learning_rate_scale: float = 1.0
    batch_tokens: int = 25000
    average_last: int = 5

    def __post_init__(self) -> None:
        for name, least in (("warmup_steps", 1), ("batch_tokens", 1), ("average_last", 0)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise ValueError(f"{name}: must be an integer of at least {least}, got {value!r}")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(f"label_smoothing: must be in [0, 1), got {self.label_smoothing!r}")
        if not self.learning_rate_scale > 0:
            raise ValueError(f"learning_rate_scale: must be positive, got "
                             f"{self.learning_rate_scale!r}")
