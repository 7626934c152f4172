"""Small real and synthetic datasets that need no network.

Every dataset is a :class:`Dataset` record holding numpy arrays and an ``index`` column: example
``i`` keeps the number ``i`` wherever it travels, so a trace can show exactly which replica saw
which example.

- ``digits``: the test set of the UCI 8×8 handwritten digits (1,797 images, 10 classes),
  scikit-learn's copy of the file, shipped inside this package, so it loads on a train or behind
  a proxy.
- ``linear``: ``y = x·w + b + noise`` with known true weights, to watch training converge to them.
- ``blobs``: Gaussian clusters, a quick classification problem of any size.
- ``mnist`` / ``fashion_mnist``: read from Keras's cache if it is already there; otherwise (and
  always unless a download is allowed) they fall back to ``digits`` with a printed note.
"""

from __future__ import annotations

import gzip
import os
from collections import namedtuple
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from .errors import DataConfigError, UnknownDatasetError

DATASETS = Path(__file__).resolve().parent / "datasets"  # data files shipped with the package

#: One example (or a batch of them) as ``to_tf()`` yields it. A namedtuple: it unpacks like the
#: plain ``(index, x, y)`` tuple (``strategy.run(replica_step, args=batch)`` with
#: ``def replica_step(index, x, y)``), and ``tf.data`` and ``tf.nest`` keep its field names, so
#: the recorder finds the examples' numbers by the name ``index`` instead of guessing.
Example = namedtuple("Example", ["index", "x", "y"])


@dataclass(frozen=True)
class Dataset:
    """A dataset in memory, ready to be turned into a ``tf.data.Dataset``."""

    name: str  # what load() was asked for, or what it fell back to
    x: np.ndarray  # (examples, features) float32 features
    y: np.ndarray  # (examples,) int64 class labels, or (examples, outputs) float32 targets
    index: np.ndarray  # (examples,) int64: each example's number in the original dataset
    num_classes: int | None  # classes for classification; None for regression
    description: str  # one line saying where the data came from
    true_weights: np.ndarray | None = field(default=None, repr=False)  # (features, outputs), synthetic only
    true_bias: np.ndarray | None = field(default=None, repr=False)  # (outputs,), synthetic only

    def __len__(self) -> int:
        return int(self.x.shape[0])

    @property
    def num_features(self) -> int:
        return int(self.x.shape[1])

    def take(self, n: int) -> "Dataset":
        """The first ``n`` examples (indices kept)."""
        return replace(self, x=self.x[:n], y=self.y[:n], index=self.index[:n])

    def split(self, test_fraction: float = 0.2, seed: int = 0) -> tuple["Dataset", "Dataset"]:
        """A seeded shuffle cut into (train, test); each example keeps its index."""
        if not 0.0 < test_fraction < 1.0:
            raise DataConfigError(
                f"test_fraction must be between 0 and 1, got {test_fraction}; 0.2 keeps a fifth "
                "of the examples for testing."
            )
        order = np.random.default_rng(seed).permutation(len(self))
        cut = len(self) - int(round(len(self) * test_fraction))
        pick = lambda rows: replace(self, x=self.x[rows], y=self.y[rows], index=self.index[rows])
        return pick(order[:cut]), pick(order[cut:])

    def to_tf(
        self,
        batch_size: int | None = None,
        *,
        with_index: bool = True,
        shuffle: bool = False,
        seed: int = 0,
        drop_remainder: bool = False,
    ):
        """A ``tf.data.Dataset`` of :data:`Example` ``(index, x, y)`` (``(x, y)`` for Keras ``fit``).

        ``batch_size`` is the *global* batch size: the strategy cuts each batch into
        ``num_replicas_in_sync`` per-replica batches. With ``with_index=False`` a trace still
        records each replica's shard size; ``trace.example_ids(step, dataset=this)`` then finds
        the examples by their rows. One difference from a plain tuple: ``tf.data``'s ``map``
        unpacks plain tuples only, so it hands an :data:`Example` over as one argument; write
        ``.map(lambda e: (e.x, e.y))``, not ``.map(lambda index, x, y: ...)``.
        """
        import tensorflow as tf

        parts = Example(self.index, self.x, self.y) if with_index else (self.x, self.y)
        ds = tf.data.Dataset.from_tensor_slices(parts)
        if shuffle:
            ds = ds.shuffle(len(self), seed=seed, reshuffle_each_iteration=False)
        if batch_size is not None:
            ds = ds.batch(batch_size, drop_remainder=drop_remainder)
        return ds


def digits() -> Dataset:
    """The test set of the UCI 8×8 handwritten digits: 1,797 real images, pixels scaled to [0, 1]
    (the full UCI set has 5,620; see ``mirrortutor/datasets/README.md``).

    Read from ``mirrortutor/datasets/digits.csv.gz``, scikit-learn 1.9.1's own copy of the file
    (its ``load_digits`` reads it the same way: ``np.loadtxt`` of the gzipped CSV, the last
    column the label), shipped here so that no process pays for importing scikit-learn: Keras
    imports it whenever it is installed (``keras/src/wrappers/fixes.py``), in every TensorFlow
    process. Source and licence: ``mirrortutor/datasets/README.md``.
    """
    with gzip.open(DATASETS / "digits.csv.gz", "rt") as rows:
        table = np.loadtxt(rows, delimiter=",")  # (1797, 65) float64: 64 pixels 0..16, the label
    x = (table[:, :-1] / 16.0).astype(np.float32)  # (1797, 64), pixel values 0..16 → 0..1
    return Dataset(
        name="digits",
        x=x,
        y=table[:, -1].astype(np.int64),
        index=np.arange(len(x), dtype=np.int64),
        num_classes=10,
        description=("8×8 handwritten digits, 10 classes, 1,797 examples (the digits test set of the "
                     "UC Irvine repository; scikit-learn's copy of the file, scikit-learn not needed)"),
    )


def linear(
    n: int = 256, features: int = 3, outputs: int = 1, noise: float = 0.1, seed: int = 0
) -> Dataset:
    """Synthetic regression ``y = x @ w + b + noise`` whose true ``w`` and ``b`` are kept."""
    if n < 1 or features < 1 or outputs < 1 or noise < 0:
        raise DataConfigError(
            f"linear() needs n, features, outputs ≥ 1 and noise ≥ 0; got n={n}, "
            f"features={features}, outputs={outputs}, noise={noise}."
        )
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(features, outputs)).astype(np.float32)
    b = rng.normal(size=(outputs,)).astype(np.float32)
    x = rng.normal(size=(n, features)).astype(np.float32)
    y = (x @ w + b + noise * rng.normal(size=(n, outputs))).astype(np.float32)
    return Dataset(
        name="linear",
        x=x,
        y=y,
        index=np.arange(n, dtype=np.int64),
        num_classes=None,
        description=f"synthetic y = x·w + b + {noise}·noise, {n} examples, seed {seed}",
        true_weights=w,
        true_bias=b,
    )


def blobs(n: int = 512, features: int = 2, classes: int = 3, seed: int = 0) -> Dataset:
    """Synthetic Gaussian clusters: ``classes`` blobs in ``features`` dimensions."""
    if n < 1 or features < 1 or classes < 2:
        raise DataConfigError(
            f"blobs() needs n ≥ 1, features ≥ 1 and classes ≥ 2; got n={n}, "
            f"features={features}, classes={classes}."
        )
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=3.0, size=(classes, features))
    y = rng.integers(0, classes, size=n)
    x = (centres[y] + rng.normal(size=(n, features))).astype(np.float32)
    return Dataset(
        name="blobs",
        x=x,
        y=y.astype(np.int64),
        index=np.arange(n, dtype=np.int64),
        num_classes=classes,
        description=f"synthetic Gaussian blobs, {classes} classes, {n} examples, seed {seed}",
    )


_KERAS_FILES = {"mnist": "mnist.npz", "fashion_mnist": "fashion-mnist"}


def _keras_image_set(name: str, allow_download: bool) -> Dataset:
    """MNIST-style sets from Keras: cached or (when allowed) downloaded; else digits with a note."""
    cache = Path(os.environ.get("KERAS_HOME", Path.home() / ".keras")) / "datasets"
    cached = (cache / _KERAS_FILES[name]).exists()
    if cached or allow_download:
        try:
            import keras

            (x, y), _ = getattr(keras.datasets, name).load_data()
            x = (x.reshape(len(x), -1) / 255.0).astype(np.float32)  # (60000, 784)
            return Dataset(
                name=name,
                x=x,
                y=y.astype(np.int64),
                index=np.arange(len(x), dtype=np.int64),
                num_classes=10,
                description=f"Keras's {name} training set, {len(x):,} examples",
            )
        except Exception as exc:  # no network, a proxy, a broken cache: fall back, say why
            reason = f"loading it failed ({type(exc).__name__}: {exc})"
    else:
        reason = (
            f"it is not in Keras's cache ({cache}) and downloads are off "
            "(pass allow_download=True or set MIRRORTUTOR_ALLOW_DOWNLOAD=1 to try)"
        )
    print(f"Note: {name} is not available offline: {reason}. Using the 8x8 digits shipped in mirrortutor instead.")
    return digits()


_LOADERS = {"digits": digits, "linear": linear, "blobs": blobs}


def names() -> list[str]:
    """Every name :func:`load` accepts."""
    return sorted([*_LOADERS, *_KERAS_FILES])


def load(name: str, *, allow_download: bool | None = None, **kwargs) -> Dataset:
    """Load a dataset by name; see :func:`names` for the choices.

    Keyword arguments go to the synthetic generators (``n``, ``features``, ``seed`` …).
    """
    if name in _LOADERS:
        return _LOADERS[name](**kwargs)
    if name in _KERAS_FILES:
        if allow_download is None:
            allow_download = os.environ.get("MIRRORTUTOR_ALLOW_DOWNLOAD") == "1"
        return _keras_image_set(name, allow_download)
    raise UnknownDatasetError(
        f"No dataset called {name!r}. Choose one of: {', '.join(names())}; for example "
        "mt.data.load('digits')."
    )
