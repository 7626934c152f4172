"""mt.data: real and synthetic datasets that need no network, each example carrying its index."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

import mirrortutor as mt


def test_digits_is_the_real_bundled_dataset():
    """digits loads the package's copy of the UCI 1,797 8x8 images offline, scaled to [0, 1], with
    indices 0..n-1: the file scikit-learn 1.9.1 ships (its checksum, in datasets/README.md), with
    that file's class sizes (178 zeros, 182 ones, …, as load_digits gives them)."""
    d = mt.data.load("digits")
    assert (len(d), d.num_features, d.num_classes) == (1797, 64, 10)
    assert d.x.dtype == np.float32 and 0.0 <= d.x.min() and d.x.max() == 1.0
    assert np.array_equal(d.index, np.arange(1797))
    assert np.bincount(d.y).tolist() == [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]
    assert np.array_equal(d.x * 16, np.round(d.x * 16))  # the counts 0..16, each divided by 16
    shipped = (mt.data.DATASETS / "digits.csv.gz").read_bytes()
    readme = (mt.data.DATASETS / "README.md").read_text(encoding="utf-8")
    assert hashlib.sha256(shipped).hexdigest() in readme


def test_no_scikit_learn_is_imported_for_the_data():
    """Loading digits imports no scikit-learn (Keras imports it in every TensorFlow process when it
    is installed, and that import costs seconds per process)."""
    from conftest import run_python

    done = run_python("""
        import sys
        import mirrortutor as mt
        mt.data.load("digits")
        print("sklearn" in sys.modules)
    """)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "False"


def test_linear_keeps_its_true_weights():
    """linear's targets are x·w + b + noise with the w and b it reports (noise 0: exactly)."""
    d = mt.data.linear(n=50, features=4, noise=0.0, seed=3)
    np.testing.assert_allclose(d.y, d.x @ d.true_weights + d.true_bias, rtol=1e-6)
    again = mt.data.linear(n=50, features=4, noise=0.0, seed=3)
    assert np.array_equal(d.x, again.x), "same seed, same data"


def test_split_keeps_indices_and_is_a_partition():
    """split() shuffles with a seed and every example lands in exactly one part with its index."""
    d = mt.data.blobs(n=100)
    train, test = d.split(0.25, seed=1)
    assert (len(train), len(test)) == (75, 25)
    assert sorted(np.concatenate([train.index, test.index]).tolist()) == list(range(100))
    np.testing.assert_array_equal(train.x, d.x[train.index])


def test_to_tf_yields_index_x_y_batches():
    """to_tf(batch) gives Example(index, x, y) global batches in order, named fields that unpack
    like a tuple; with_index=False gives a plain (x, y) tuple, as Keras fit takes."""
    d = mt.data.digits().take(70)
    batches = list(d.to_tf(32))
    assert [int(b.index.shape[0]) for b in batches] == [32, 32, 6]
    assert all(isinstance(b, mt.data.Example) for b in batches)
    index, x, y = batches[1]
    np.testing.assert_array_equal(index.numpy(), np.arange(32, 64))
    np.testing.assert_array_equal(x.numpy(), batches[1].x.numpy())
    # tf.data's map hands a namedtuple over as one argument (it unpacks plain tuples only)
    xy = next(iter(d.to_tf(8).map(lambda e: (e.x, e.y))))
    assert xy[0].shape == (8, 64)
    pair = next(iter(d.to_tf(8, with_index=False)))
    assert type(pair) is tuple and pair[0].shape == (8, 64) and pair[1].shape == (8,)


def test_mnist_falls_back_to_digits_offline(tmp_path, monkeypatch, capsys):
    """mnist with no cached copy and downloads off falls back to digits and says why, no network."""
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    monkeypatch.delenv("MIRRORTUTOR_ALLOW_DOWNLOAD", raising=False)
    d = mt.data.load("mnist")
    assert d.name == "digits" and len(d) == 1797
    note = capsys.readouterr().out
    assert "mnist is not available offline" in note and "allow_download=True" in note


def test_unknown_dataset_name_lists_the_choices():
    """An unknown name raises UnknownDatasetError naming every valid choice."""
    with pytest.raises(mt.UnknownDatasetError, match="No dataset called 'cifar'.*digits.*linear"):
        mt.data.load("cifar")


@pytest.mark.parametrize("kwargs", [{"n": 0}, {"noise": -1.0}])
def test_bad_generator_arguments_are_rejected(kwargs):
    """Impossible sizes or negative noise raise ValueError saying what is allowed."""
    with pytest.raises(ValueError, match="needs"):
        mt.data.linear(**kwargs)
