"""The use cases: one module per command, named after it (``abtest gates`` is
:mod:`abtest.app.gates`), the only code the CLI calls and what a program calls to do what a
command does. :mod:`abtest.app.profiles` is the one step every command that reaches a node
shares: its profile, with kubectl's --kubeconfig/--context applied."""
