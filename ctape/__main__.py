"""`python -m ctape` and the `ctape` command (pyproject's entry point is `run`)."""


def run() -> None:
    # a Ctrl-C while the command line's modules are still being imported (the first
    # ~0.1 s) printed a traceback: the handling that turns it into one line is in them
    try:
        from .cli import main
    except KeyboardInterrupt:
        import sys

        sys.stderr.write("ctape: error: interrupted\n")
        raise SystemExit(130) from None
    from .cli import base

    base.OWN_PROCESS = True  # (a failed command need not wait for its transfers: base._leave_lingering_threads)
    main()


if __name__ == "__main__":
    run()
