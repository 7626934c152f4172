"""The wall: every use of TensorFlow's private API in mirrortutor, each with the reason.

mirrortutor observes TensorFlow from the inside, at the places TensorFlow itself routes through.
Where the public API (``tf.distribute``, ``tf.nest``, ``tf.compat.v1``) can do a job, the package
uses it. What is left lives in this folder and nowhere else, so a TensorFlow upgrade that moves a
private name breaks here, and the bit-identity tests (``tests/record``) say so at once:

- :mod:`.hooks`: where the strategies hear what TensorFlow does (the extended objects and the
  cross-device pass-through), the recording's entry point;
- :mod:`.graph`: what the recorder's own graph pieces need (an un-lowered ``Case``, XLA detection,
  ops let out of the automatic control-dependency chain);
- :mod:`.cluster`: the eager context and TensorFlow's ``ClusterCoordinator``, for the clusters;
- :mod:`.coordinator`: what the recording ``ParameterServerStrategy`` and coordinator need (where
  TF places a variable, a counter placed by hand, whether a RemoteValue has come).

Nothing is imported here.
"""
