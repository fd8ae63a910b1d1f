"""The jit driver: from a call of the user's program to a cached, compiled one.

``frontend`` runs the program on proxies and records its trace (in-place updates functionalized by
``functionalization``, Python state watched by ``python_state``); ``prologue`` and ``cache`` decide which
compiled program a later call reuses; ``pipeline`` orders the compilation phases; ``runtime`` runs an entry
(joining its backward to torch.autograd); ``module`` is ``ThunderModule``. It sits above the IR
(``thunder.core``), the torch language, the transforms and the executors, and imports all of them.
"""
