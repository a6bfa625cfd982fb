"""ray-vast: rent vast.ai machines as Ray workers, declaratively, and keep the bill safe.

The packages, from the bottom up: `model` (plain data), `nets` and `planning` (the pure core's
findings and decisions), `spec` (YAML in), `state` (the records and the ledger on disk), `vast`
(the API client), `applying` (the one executor), `head` (the workers' services), `views` (what
people read), `watch` (the controller's loop) and `cli` (the command). Each package's docstring
says what it holds and what it may import; tests/layering/layers.py enforces the imports. Modules
here at the top are shared by several layers: `clock`, `errors` (the one error root), `deps`,
`childenv`, `rayruntime`, `planfile`, `operations` (the commands' work) and `up`.
"""

__version__ = "0.1.0"
