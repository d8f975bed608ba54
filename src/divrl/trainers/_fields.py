"""Shared helper for the documented dataclass fields of DivRLConfig and its method mixins."""


def _help(text: str) -> dict[str, str]:
    """Field metadata carrying the help text TrlParser shows for `--field`."""
    return {"help": text}
