"""Clusters: real ``tf.distribute.Server`` tasks and worker processes on this machine.

- :mod:`.processes`: one process supervisor, a janitor, free ports, network containment
  (standard library);
- :mod:`.kernel`: the course's notebook kernel, in a private network namespace over Unix sockets;
- :mod:`.agent`: the child process that runs a parameter-server cluster's tasks;
- :mod:`.ps`: ``mt.LocalCluster``, the parameter-server cluster the notebook coordinates, and
  :mod:`.watch`, which turns its lost tasks into plain errors;
- :mod:`.launcher`: the child process that starts a multi-worker run's workers, and
  :mod:`.program_worker`, which runs a plain script unchanged in each of them
  (``cluster.run_program``; its result: :mod:`.program_run`);
- :mod:`.multiworker`: ``mt.MultiWorkerCluster``, and :mod:`.tfconfig`: ``mt.tf_config``.

Nothing is imported here, so a child process imports only what it runs.
"""
