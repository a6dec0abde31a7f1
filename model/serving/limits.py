"""What one call may cost on a shared server, besides the trace budget (app/resources.py): the
server's limits in one place."""

FULL_TRACE_BYTES = 2 * 2**30  # a full trace (every tensor, forward and backward) up to this; past it, the view's names
PATCH_TOKENS = 400_000  # tokens run through the model by one patching experiment (Ask why), at most
