"""Starting the simulator so that a world depends on its task and variation alone.

The package seeds Scala's `Random` with the variation at every load (`PythonInterface.doLoad`),
yet one variation loaded again gave another world: in one JVM, find-living-thing test 225's
first room differed over six loads (a cup of red paint, then of blue), the same six in
another fresh JVM, and its random events (a bee's pollination, which seeds a plant gets)
differed with them. The cause is the JVM's identity hash codes: the simulator keeps its objects
in hash sets, so the order in which it builds and ticks them, and so the order of its random
draws, follows the objects' identity hashes, which HotSpot draws per thread and in the order
objects ask for them (every earlier load, and whichever Py4J thread serves the call, moves
them). A gold path drawn in one JVM then failed in the env's: use-thermometer train 38's
path put a substance of 52 C in the "below 50 C" box, and mendelian-genetics-unknown-plant
train 61's waited for seeds that never grew (a whole-split gold run, docs/benchmarks.md).

`-XX:hashCode=2` (HotSpot's experimental choice of a constant identity hash) takes that
variation out: every load of a variation, in any JVM, from any thread, builds the same world
and runs the same random events, so an episode is reproducible from its task and its actions.
What it costs a step is measured against the plain start by `bench/bench_scienceworld.py`.

`-Xmx512m` caps the heap. Without a cap HotSpot allows a quarter of the machine's memory, and
the simulator's garbage is collected lazily: a JVM that had played a few long gold paths held
1-4 GB while its live heap, after a full collection, was 17-60 MB. A pool of them
(an env pool beside a gold policy's JVMs) then ran a 24 GB machine out of memory. The heaviest
paths (inclined-plane-friction-named-surfaces' 797 actions, mendelian-genetics' 260) played out
the same under a 256 MB cap, at the same speed (docs/benchmarks.md).
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

#: The JVM options the simulator is started with (through `JDK_JAVA_OPTIONS`, which the java
#: launcher reads: the package's `ScienceWorldEnv` takes no JVM options).
JVM_OPTIONS = "-XX:+UnlockExperimentalVMOptions -XX:hashCode=2 -Xmx512m"


class _WithoutTraceback(logging.Filter):
    """Keeps a Py4J log record's message and drops its traceback.

    When a JVM dies, Py4J's finalizers still try to reach it (each `JavaObject` freed tells the
    JVM so) and log the failed connection with its traceback. A finalizer runs wherever the
    garbage collector does, also inside `ast.parse` (pytest's assertion rewriting, `inspect`):
    formatting the traceback parses source again (Python 3.11's caret lines), and the nested
    parse broke the outer one with "SystemError: AST constructor recursion depth mismatch"
    (CPython 3.11.7; after `test_a_jvm_that_dies_is_an_infrastructure_failure_and_is_replaced`).
    The death itself is reported by whoever used the JVM (the env's `JVMDied`, the gold
    policy's error). Here, where every simulator JVM starts, so that it holds for all of them."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        return True


for _name in ("py4j.java_gateway", "py4j.clientserver"):
    logging.getLogger(_name).addFilter(_WithoutTraceback())


log = logging.getLogger(__name__)
_starting = threading.Lock()  # the environment is the process's: one start at a time


def start() -> Any:
    """A new `scienceworld.ScienceWorldEnv` (its own JVM) started with `JVM_OPTIONS`, on top of
    any `JDK_JAVA_OPTIONS` already set."""
    from scienceworld import ScienceWorldEnv

    with _starting:
        before = os.environ.get("JDK_JAVA_OPTIONS")
        os.environ["JDK_JAVA_OPTIONS"] = f"{before} {JVM_OPTIONS}" if before else JVM_OPTIONS
        try:
            return ScienceWorldEnv("")
        finally:
            if before is None:
                del os.environ["JDK_JAVA_OPTIONS"]
            else:
                os.environ["JDK_JAVA_OPTIONS"] = before


def stop(game: Any) -> None:
    """Shut a simulator JVM down once, killing it if it does not exit on its own (a dead one
    too: its polite close fails)."""
    proc = getattr(game._gateway, "java_process", None)
    try:
        game.close()
    except Exception as e:  # already dead: nothing to shut down politely
        log.debug("closing a ScienceWorld JVM: %s", e)
    # The package's __del__ closes again, and a second Py4J shutdown raises (at exit, noisily).
    game.close = lambda: None
    if proc is not None:
        try:
            proc.wait(timeout=5)
        except Exception:
            proc.kill()


def reads_after_step(server: Any) -> tuple[str, str, Any]:
    """What the package's `ScienceWorldEnv.step` reads after every action (and its `reset`
    after the first `look around`), in its order: the room (`look`), the inventory, the task
    description and the valid action-object combinations. Returns (room, inventory, the valid
    combinations as the JVM's list, not copied over the bridge).

    These reads are not only reads. Listing the valid combinations moves the world's later
    random events (the wording of their objects also changes from one listing to the next):
    grow-fruit train 6's gold path completes the task (score 100, 78 moves) when every step
    makes the package's reads, and leaves it at 46 after 89 moves when the steps skip the
    listing; the room, inventory and task description reads change nothing there. The
    package's agents play the world its `step` makes, so every step here makes the same reads
    in the same order, whether or not its caller wants their answers."""
    room = str(server.freeActionLook())
    inventory = str(server.freeActionInventory())
    server.freeActionTaskDesc()
    return room, inventory, server.getValidActionObjectCombinations()
