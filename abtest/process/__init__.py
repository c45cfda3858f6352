"""What every layer of one abtest process shares, beneath them all but ``abtest.errors``: the
tool's version (:mod:`~abtest.process.version`), how SIGINT/SIGTERM become an orderly stop of
every thread (:mod:`~abtest.process.stop`), and how a held connection closes
(:mod:`~abtest.process.closing`). See docs/architecture.md."""
