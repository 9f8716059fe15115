"""The named recipes: the paper's models (Table 3, section 6.3) and CPU-sized ones.

Each preset is a flat table of the fields it changes from the defaults of `TransformerConfig`
(architecture), `TrainingSettings` and `SearchSettings`; `Recipe.preset(name)` splits it
into the three, `TransformerConfig.preset(name)` takes the architecture alone.
"""
from __future__ import annotations

from typing import Any

PRESETS: dict[str, dict[str, Any]] = {
    # The paper's models (Table 3, rows "base" and "big").
    "base": {},
    "big": {"d_model": 1024, "d_ff": 4096, "num_heads": 16, "dropout": 0.3, "average_last": 20},
    # Section 6.3: English constituency parsing (4 layers, d_model 1024, beam 21, alpha 0.3).
    "parsing": {"num_layers": 4, "d_model": 1024, "d_ff": 4096, "num_heads": 16,
                "max_length": 1024, "beam_size": 21, "length_penalty": 0.3,
                "max_decode_extra": 300},
    # CPU-sized parsing for the 3.9k-tree WSJ sample: smaller beam so CPU decoding stays cheap;
    # peak learning rate halved (1e-3): at 2e-3 the decoder collapsed to one tree for every input.
    "parsing-small": {"vocab_size": 4000, "num_layers": 3, "d_model": 256, "d_ff": 1024,
                      "num_heads": 4, "dropout": 0.2, "warmup_steps": 1000,
                      "learning_rate_scale": 0.5, "batch_tokens": 4096,
                      "max_length": 256, "beam_size": 8, "length_penalty": 0.3,
                      "max_decode_extra": 300},
    # CPU-sized presets: `small` for Multi30k-sized corpora, `tiny` for tests and the demo.
    "small": {"vocab_size": 8000, "num_layers": 3, "d_model": 256, "d_ff": 1024,
              "num_heads": 4, "dropout": 0.2, "warmup_steps": 2000, "batch_tokens": 4096,
              "max_length": 128},
    # `small` as tuned on Multi30k en->de dev (benchmarks/RESULTS.md, "Multi30k" and "Recipe
    # ablations"): more dropout, attention dropout, a short warmup, 2,048-token batches (twice
    # the updates per token), peak learning rate 2.6e-3, beam 5 as the published baseline.
    "multi30k": {"vocab_size": 8000, "num_layers": 3, "d_model": 256, "d_ff": 1024,
                 "num_heads": 4, "dropout": 0.25, "attention_dropout": 0.1,
                 "warmup_steps": 1000, "learning_rate_scale": 1.3, "batch_tokens": 2048,
                 "max_length": 128, "beam_size": 5},
    "tiny": {"vocab_size": 1000, "num_layers": 2, "d_model": 64, "d_ff": 256, "num_heads": 4,
             "dropout": 0.1, "warmup_steps": 400, "batch_tokens": 2048, "max_length": 64},
}


def preset_fields(name: str) -> dict[str, Any]:
    """The fields preset `name` sets; a ValueError naming the presets if there is none."""
    if name not in PRESETS:
        raise ValueError(f"preset: unknown preset {name!r}; choose from {sorted(PRESETS)}")
    return dict(PRESETS[name])
