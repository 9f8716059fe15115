"""Packaging for keras-transformer."""
from setuptools import find_packages, setup

setup(
    name="keras-transformer",
    version="0.1.0",
    description="The Transformer of 'Attention Is All You Need' as Keras 3 layers and a "
    "TensorFlow training, decoding and export toolkit.",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["keras_transformer", "keras_transformer.*", "trainers"]),
    # CI tests both ends of each range: the newest releases and .ci/oldest-constraints.txt.
    # TensorFlow and Keras are capped at the newest tested minor release: the fast kernels and
    # keras_transformer/compat.py use private APIs checked on these versions only.
    install_requires=[
        "tensorflow>=2.20,<2.22",
        "keras>=3.10,<3.16",
        "tensorflow-text>=2.20,<2.22",
        "tensorflow-datasets>=4.9.10",
        # tensorflow-datasets imports it to prepare a dataset but declares it for Python < 3.9
        # only: without it every download_and_prepare fails.
        "importlib-resources>=6.0",
        # Marian models' options and vocabularies are YAML (`kt-import`).
        "pyyaml>=6.0.1",
        # Hugging Face's layout of imported models (`model.safetensors`), read without torch.
        "safetensors>=0.4",
        "sacrebleu>=2.4",
        "sentencepiece>=0.2.0",
        # Documents (keras_transformer.documents): sentences found by sentencex (chosen by
        # measurement: benchmarks/RESULTS.md, "Sentence splitting"), Markdown read by
        # markdown-it-py (CommonMark); HTML by the standard library's html.parser.
        "sentencex>=1.0.32",
        "markdown-it-py>=4.0",
        "matplotlib>=3.9",
        "tensorboard>=2.20",
        # Every SavedModel export carries TF Serving warm-up requests, written as its
        # PredictionLog protos (252 KB of Python; its grpcio and protobuf come with tensorflow).
        "tensorflow-serving-api>=2.20,<2.22",
    ],
    # ctranslate2: `kt-export --format ctranslate2` and its translations are tested;
    # pytest-xdist: the README's test command runs the suite in two processes, the test files in
    # the order tests/conftest.py gives them (--no-loadscope-reorder, from 3.8).
    # pytest-timeout: every test has a time limit (pytest.ini).
    # ai-edge-litert: the LiteRT interpreter that runs `kt-export --format litert`'s models.
    extras_require={"test": ["pytest>=8.0", "pytest-xdist>=3.8", "pytest-timeout>=2.2", "ruff>=0.6",
                             "ctranslate2>=4.8", "sacremoses>=0.1", "ai-edge-litert>=2.3",
                             "selenium>=4.20"],
                    "ctranslate2": ["ctranslate2>=4.8"],
                    "litert": ["ai-edge-litert>=2.3"],
                    "benchmark-text": ["sacremoses>=0.1"]},
    entry_points={
        "console_scripts": [
            "kt-train=trainers.launch:train",
            "kt-prepare=trainers.launch:prepare",
            "kt-evaluate=trainers.launch:evaluate",
            "kt-average-checkpoints=trainers.launch:average_checkpoints",
            "kt-export=trainers.launch:export",
            "kt-translate=trainers.launch:translate",
            "kt-translate-corpus=trainers.launch:translate_corpus",
            "kt-plot-attention=trainers.launch:plot_attention",
            "kt-import=trainers.launch:import_model",
            "kt-score=trainers.launch:score",
            "kt-align=trainers.launch:align",
        ]
    },
)
