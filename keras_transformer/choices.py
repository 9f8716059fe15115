"""The named choices and defaults the command lines offer, in a module that imports nothing
heavy: a command's `--help` (`trainers.arguments`) reads them without importing TensorFlow.
Each is used under this name by the module that acts on it (`precision`, `fast.selection`, the
exporters, `data.languages`, `data.prepare`, `parsing.linearize`, `serving.warmup`).
"""
PRECISION_POLICIES = ("float32", "mixed_bfloat16", "mixed_float16")
"""Keras mixed-precision policies a run trains in."""
PRECISION_CHOICES = ("auto", *PRECISION_POLICIES)
"""kt-train's `--precision`: a policy, or `auto` (measured on the machine)."""
SERVING_DTYPES = ("float32", "bfloat16")
"""What an export may store and compute in: bfloat16 has float32's range, so inference needs no
loss-scale-like care; float16 does not."""

FAST = "fast"
REFERENCE = "reference"
KERNEL_SETS = (FAST, REFERENCE)
"""The kernel sets: the core's references and the `fast` subpackage's twins."""
KERNEL_CHOICES = ("auto", *KERNEL_SETS)
"""kt-train's `--kernels`: a set, or `auto` (measured on the machine)."""
KERNELS_VARIABLE = "KT_KERNELS"
"""The environment variable that chooses the kernel set."""

CTRANSLATE2_QUANTIZATIONS = ("int8", "int8_float32", "int16", "float16", "bfloat16", "float32")
"""How a CTranslate2 export stores its weights (CTranslate2's names)."""
LITERT_QUANTIZATIONS = ("float32", "float16", "int8")
"""How a LiteRT export stores its weights."""
WARMUP_MAX_WIDTH = 64
"""An XLA export's warm-up requests cover each padded source width up to this many pieces."""

PLACEMENTS = ("source", "target")
"""Where a model of several target languages reads its language token."""
DEFAULT_SHARD_PAIRS = 1_000_000
"""Pairs per shard of prepared training data."""
LEAVES = ("placeholder", "words")
"""What stands for each word in a linearized parse tree."""
