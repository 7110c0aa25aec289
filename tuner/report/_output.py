"""Writing what tuner produces (analysis.json, report.html, RECIPE.md) all or nothing.

Each file is written to a temporary file in its own folder, flushed to disk and renamed over
the target (os.replace is atomic on POSIX), so a reader, a full disk or a crash never sees
half a report, and a failed write leaves neither a truncated file nor a ``.tmp`` behind. The
file gets the mode an ordinary ``open`` would give it (0644 under the usual umask 022), not
mkstemp's private 0600, so teammates on a shared file system can read the report. A folder
that cannot be used (a file in the way, read-only) is one line naming it.

Example:
    >>> import tempfile
    >>> out = output_dir(Path(tempfile.mkdtemp()) / "report")
    >>> write_atomic(out / "RECIPE.md", "# recipe\\n").read_text()
    '# recipe\\n'
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from tuner.errors import OutputError

__all__ = ["output_dir", "write_atomic"]


def output_dir(path: str | Path, *, flag: str = "--out") -> Path:
    """Create ``path`` as a folder (with parents) or raise OutputError naming it (and ``flag``,
    the option that gave it)."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise OutputError(f"{flag} {out}: is a file, not a folder; give a folder (it is created if missing)")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{flag} {out}: cannot create the folder: {exc.strerror or exc}") from None
    return out


def _umask() -> int:
    mask = os.umask(0o022)   # reading the umask means setting it: put it straight back
    os.umask(mask)
    return mask


def write_atomic(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` all or nothing; OutputError names the file and the reason."""
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}; nothing was changed there") from None
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
    return path
