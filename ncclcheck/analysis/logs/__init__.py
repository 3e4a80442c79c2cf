"""Reading NCCL, torch and torchrun logs: framing lines, NCCL's own messages, and the findings they prove."""
