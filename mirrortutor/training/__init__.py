"""Training: the experiments the course runs on top of the instrumented strategies.

- :mod:`.scaling`: Keras ``fit`` at any replica count (``mt.experiments``);
- :mod:`.stragglers`: slow workers and replicas, shared by both SGD trainers;
- :mod:`.syncsgd`, :mod:`.asyncsgd`: synchronous and asynchronous SGD with every update on record;

Nothing is imported here.
"""
