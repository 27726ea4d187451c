"""Process memory readings for the benchmark scripts (Linux /proc)."""
from __future__ import annotations


def status_kb(field: str) -> int:
    """A `VmRSS` / `VmHWM` style field of /proc/self/status, in kB (0 where unavailable)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def reset_peak() -> bool:
    """Reset the process's peak RSS mark (VmHWM) so a later reading covers only what follows."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False
