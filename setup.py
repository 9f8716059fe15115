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
    install_requires=[
        "tensorflow>=2.16",
        "keras>=3.0",
        "tensorflow-text>=2.16",
        "tensorflow-datasets>=4.9",
        "sacrebleu>=2.0",
        "sentencepiece>=0.1.99",
        "matplotlib>=3.5",
        "tensorboard>=2.16",
    ],
    extras_require={"test": ["pytest>=7"]},
    entry_points={
        "console_scripts": [
            "kt-train=trainers.train:main",
            "kt-evaluate=trainers.evaluate:main",
            "kt-average-checkpoints=trainers.average_checkpoints:main",
            "kt-export=trainers.export:main",
        ]
    },
)
