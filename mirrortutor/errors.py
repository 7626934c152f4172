"""Every error mirrortutor raises, in one place.

One base class, :class:`MirrortutorError`, so a teacher can catch them all; each subclass also
derives from the builtin it resembles (``ValueError`` for bad arguments, ``RuntimeError`` for a
wrong moment), so code that already catches those keeps working.

Messages follow one pattern: what happened, what was expected, what was got, and what to do next.
Raised inside a ``tf.function``, they reach the caller unchanged (see :class:`MirrortutorError`).
The one warning class, :class:`ExposedPortWarning`, lives here too. Nothing here imports anything,
so every module of the package can raise these without loading TensorFlow.
"""

from __future__ import annotations


class MirrortutorError(Exception):
    """Base class of all mirrortutor errors.

    ``ag_pass_through``: one raised while ``tf.function`` traces a step (a model built outside
    the scope, replicas' values that cannot be added) would otherwise reach the student as
    AutoGraph's ``StagingError``, our sentence buried under "in user code:" and a stack: AutoGraph
    re-creates an error raised in converted code with that message, keeping its type only for the
    builtin classes themselves (``ErrorMetadataBase.create_exception``,
    tensorflow/python/autograph/pyct/error_utils.py), else ``StagingError``
    (``_ErrorMetadata.create_exception``, tensorflow/python/autograph/impl/api.py). With the
    attribute, ``_attach_error_metadata`` (same file) attaches nothing and the error leaves as it
    is, as TF's own ``UnliftableError`` does (tensorflow/python/ops/op_selector.py): the student
    reads our type and our sentence.
    """

    ag_pass_through = True


class ReplicaCountError(MirrortutorError, ValueError):
    """A replica count that is not a positive whole number, or more than can be had."""


class DevicesAlreadyInitializedError(MirrortutorError, RuntimeError):
    """TensorFlow had already started, so its devices can no longer be changed."""


class BatchSplitError(MirrortutorError, ValueError):
    """A global batch that cannot be split evenly among the replicas where that is required."""


class UnknownDatasetError(MirrortutorError, ValueError):
    """A dataset name that :mod:`mirrortutor.data` does not know."""


class DataConfigError(MirrortutorError, ValueError):
    """Dataset settings that cannot make a dataset: a test fraction outside 0..1, n < 1, ..."""


class ScalingConfigError(MirrortutorError, ValueError):
    """A scaling experiment asked for with settings it cannot run (see ``mt.experiments``)."""


class NotRecordedError(MirrortutorError, ValueError):
    """A trace asked for something it did not record (a step it skipped, values it kept as norms)."""


class TraceFileError(MirrortutorError, ValueError):
    """A file ``mt.Trace.load`` cannot read: not a trace, or written by a newer mirrortutor."""


class OutputPathError(MirrortutorError, OSError):
    """A file mirrortutor was asked to write where it cannot: a folder that does not exist, no
    permission to write there, or a path that is a folder."""


class ShapeMismatchError(MirrortutorError, ValueError):
    """Per-replica values whose shapes or dtypes do not agree."""


class UnknownPresetError(MirrortutorError, ValueError):
    """An interconnect preset name that the cost model does not know."""


class ChunkCountError(MirrortutorError, ValueError):
    """A chunk count that the all-reduce schedule cannot use (the ring needs one chunk per rank)."""


class RankError(MirrortutorError, ValueError):
    """A rank index (for example a root) outside ``0 .. num_ranks - 1``."""


class UnknownReduceOpError(MirrortutorError, ValueError):
    """A reduction name other than the ones the simulators know (``"sum"``, ``"mean"``)."""


class UnknownAlgorithmError(MirrortutorError, ValueError):
    """An all-reduce algorithm name that the simulators and the cost model do not know."""


class PerReplicaValuesError(MirrortutorError, TypeError):
    """Per-replica values that are not a list with one array per rank: ``None``, a number, a
    string, a dict, or a single one-dimensional array."""


class UnsupportedDtypeError(MirrortutorError, TypeError):
    """Per-replica values whose dtype cannot be summed (strings, objects, booleans)."""


class InvalidQuantityError(MirrortutorError, ValueError):
    """A size, time or rate that is negative, zero where it must be positive, or not finite."""


class OutsideScopeError(MirrortutorError, ValueError, AssertionError):
    """A variable used by a distributed step that was created outside ``strategy.scope()``.

    Plain TensorFlow fails the same program with a bare ``AssertionError`` (the ``assert
    isinstance(var, values.DistributedVariable)`` of ``MirroredExtended._update`` in
    tensorflow/python/distribute/mirrored_strategy.py), so this is an ``AssertionError`` too.
    """


class RecordingTypeError(MirrortutorError, TypeError):
    """A recording drop-in given the wrong kind of thing to record with: ``recording=`` that is
    not an ``mt.Recording``, or ``mt.ClusterCoordinator`` given TensorFlow's own (unrecorded)
    ``ParameterServerStrategy``."""


class ClusterConfigError(MirrortutorError, ValueError):
    """A local cluster asked for with impossible settings: no workers, taken ports, a bad mode."""


class ClusterStateError(MirrortutorError, RuntimeError):
    """A cluster or strategy used at the wrong moment: a cluster started twice, tasks that failed
    to start, or a ``MirroredStrategy`` in a kernel already connected to a cluster."""


class ClusterFailureError(MirrortutorError, RuntimeError):
    """A running cluster lost what it cannot do without: every worker, or a parameter server."""


class DeviceError(MirrortutorError, ValueError):
    """A device list a strategy cannot use: a device that does not exist here, a repeated device,
    an empty list, or a bare string where a list was expected."""


class WorkerIndexError(MirrortutorError, ValueError):
    """A worker number (to kill, restart or slow down) that the cluster does not have."""


class ClaimError(MirrortutorError, AssertionError):
    """A conclusion a chapter draws that its own data no longer supports (see ``mt.claim``)."""


class ExposedPortWarning(UserWarning):
    """Some of a cluster's gRPC ports listen on every network interface of this machine."""


class UnknownQuestionError(MirrortutorError, ValueError):
    """An exercise question id that ``mt.check`` does not know (see ``mirrortutor.grading.questions``)."""


class ExerciseFormatError(MirrortutorError, ValueError):
    """An exercise or key notebook the release and grading tools cannot use as it is."""


class DiagnosisError(MirrortutorError, ValueError):
    """``mt.diagnose`` asked to run what it cannot: not an mt strategy, a step that is not a
    function, too few steps."""


class JobConfigError(MirrortutorError, ValueError):
    """A multi-worker run asked for with settings its workers cannot run (``cluster.run_program``:
    a kill without recording, a kill step that is not a step)."""


class ProgramError(MirrortutorError, ValueError):
    """``python -m mirrortutor record`` asked to run what it cannot: a script that does not exist,
    or a trace folder it cannot write (nothing of the program has run yet)."""


class SandboxError(MirrortutorError, RuntimeError):
    """Grading cannot seal submissions off on this machine (or was told to seal a path it shows)."""
