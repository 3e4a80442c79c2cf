"""One rank (world size 1, gloo) under run's hook: it makes its process group, says so on stdout, lives ``LIVE_S``
seconds and exits normally, while the test asks its control plane's handlers as fast as it can. A handler written
in Python that is asked once the interpreter finalizes takes the process down with SIGABRT unless the hook closes
its socket first."""

import os
import sys
import time

import torch.distributed as dist

dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
dist.new_group([0])  # a group made: its members are written to the control dir
print("ready", flush=True)
time.sleep(float(os.environ.get("LIVE_S", "1")))
sys.exit(0)
