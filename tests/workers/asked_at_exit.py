"""One rank (world size 1, gloo) under run's hook: it makes its process group, says so on stdout, lives ``LIVE_S``
seconds and exits normally, while the test asks its control plane's handlers as fast as it can. A handler written
in Python that is asked once the interpreter finalizes takes the process down with SIGABRT unless the hook closes
its socket first. FORK_CHILD=1: first a child forked from the rank runs the exit handlers it inherited and ends,
then "forked" is printed: the rank's socket must still serve."""

import atexit
import os
import sys
import time

import torch.distributed as dist

dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
dist.new_group([0])  # a group made: its members are written to the control dir
print("ready", flush=True)
if os.environ.get("FORK_CHILD") == "1":
    child = os.fork()
    if child == 0:  # the exit handlers it inherited run, then it ends (a forked child finalizing hangs in torch's
        atexit._run_exitfuncs()  # ProcessGroupGloo destructor, with or without ncclcheck: not what is tested here)
        os._exit(0)
    os.waitpid(child, 0)
    print("forked", flush=True)
time.sleep(float(os.environ.get("LIVE_S", "1")))
sys.exit(0)
