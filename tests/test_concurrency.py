"""One model object, many callers at once: each call gets exactly its own trace; identical
requests are computed once; traces in flight are admitted against a memory budget.

Reference: the same traces computed one after another on one thread (bit-for-bit equal);
counts and ledgers kept by the tests themselves."""

import threading

import torch

from model.engine.capture import _active
from model.engine import ModelConfig, Transformer, run_trace
from tests.helpers import build_random_model

CFG = ModelConfig(vocab_size=16, n_ctx=8, d_model=8, n_layers=1, n_heads=2, d_ff=16)


def test_sixteen_threads_each_get_their_own_trace():
    cfg = ModelConfig(vocab_size=64, n_ctx=48, d_model=32, n_layers=2, n_heads=4, d_ff=64)
    model = Transformer(cfg).init_weights(0, std=0.2).double()
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, 64, (int(n),), generator=gen).tolist() for n in torch.randint(2, 48, (16,), generator=gen)]
    # half the callers limit capture by name, as the UI does
    patterns = [None if i % 2 == 0 else ["blocks.1.*", "hook_logits"] for i in range(16)]
    expected = [run_trace(model, p, names=n, backward=True) for p, n in zip(prompts, patterns)]

    results: dict[int, object] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(16)

    def work(i):
        try:
            start.wait()
            for _ in range(3):  # overlap several calls per thread
                results[i] = run_trace(model, prompts[i], names=patterns[i], backward=True)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors

    for i, want in enumerate(expected):
        got = results[i]
        assert got.tokens == prompts[i]
        assert got.names() == want.names(), i
        for name in want.names():
            # bit-for-bit (NaN only where the reference has NaN: hook_loss's last position)
            assert torch.allclose(got[name], want[name], rtol=0, atol=0, equal_nan=True), (i, name)
        assert got.loss == want.loss

    assert all(p.grad is None for p in model.parameters())
    assert not any(m._forward_hooks or m._forward_pre_hooks or m._backward_hooks for m in model.modules())
    assert _active.get() is None


def test_identical_requests_in_flight_are_computed_once():
    """Eight threads ask the trace cache for the same trace at once: one computation, one object."""
    import threading

    from model.serving import TraceCache

    cache, calls, start = TraceCache(), [], threading.Barrier(8)

    def compute():
        calls.append(1)
        threading.Event().wait(0.2)  # long enough for every thread to arrive while it runs
        return run_trace(build_random_model(CFG), [1, 2, 3])

    def ask(results, i):
        start.wait()
        results[i] = cache.get("same", compute)

    results = [None] * 8
    threads = [threading.Thread(target=ask, args=(results, i)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and all(r is results[0] for r in results)


def test_admission_keeps_the_bytes_in_flight_within_the_budget_first_come_first_served():
    """Reference: a ledger kept by the test itself of what runs at each moment. Twelve requests of
    40 bytes against a 100-byte budget: at most two run at once, in arrival order, each waiting one
    told how many were ahead; one request larger than the budget runs alone."""
    import threading
    import time

    from model.serving import Admission

    admission, lock = Admission(100), threading.Lock()
    running, peak, order, told = [0], [0], [], {}

    def request(i, nbytes):
        def wait(ahead):
            told.setdefault(i, ahead)

        with admission.admit(nbytes, wait):
            with lock:
                order.append(i)
                running[0] += nbytes
                peak[0] = max(peak[0], running[0])
            time.sleep(0.05)
            with lock:
                running[0] -= nbytes

    threads = []
    for i in range(12):
        threads.append(threading.Thread(target=request, args=(i, 40)))
        threads[-1].start()
        time.sleep(0.005)  # arrival order 0, 1, 2, ...
    for t in threads:
        t.join()
    assert peak[0] <= 100 and order == list(range(12))
    assert told and all(ahead >= 1 for ahead in told.values()) and 11 in told
    big = threading.Thread(target=request, args=(99, 500))
    small = threading.Thread(target=request, args=(100, 40))
    peak[0] = 0
    big.start()
    time.sleep(0.01)
    small.start()
    big.join(); small.join()
    assert peak[0] == 500  # the large one ran, and alone
    assert admission.in_flight == 0 and admission.running == 0 and admission.waiting() == 0


def test_a_kept_trace_holds_its_bytes_until_nothing_refers_to_it():
    """Reference: the test's own record of what it holds. A computed result kept with keep() is
    counted after its computation ends, until the last reference to it goes (a page drawing it,
    a cache); a request that does not fit meanwhile waits, asks on_pressure once to let go of
    finished results, and runs when they are released."""
    import gc
    import threading
    import time

    from model.serving import Admission, BoundedCache

    class Result:  # stands for a Trace: any object that can be weakly referenced
        pass

    cache = BoundedCache(lambda value: 1, max_bytes=10, max_entries=10)
    pressed = []

    def let_go():
        pressed.append(1)
        cache.clear()

    admission = Admission(100, on_pressure=let_go)
    with admission.admit(90) as keep:
        result = Result()
        keep(result, 60)
    assert admission.in_flight == 60 and admission.running == 0  # computed, still held
    cache.get("key", lambda: result)
    del result  # only the cache refers to it now
    gc.collect()
    assert admission.in_flight == 60

    ran = threading.Event()

    def request():
        with admission.admit(50):
            ran.set()

    thread = threading.Thread(target=request)
    thread.start()
    thread.join(timeout=5)
    assert ran.is_set() and pressed == [1]  # the cache let go, the 60 bytes were released
    assert admission.in_flight == 0 and len(cache) == 0

    held = Result()  # a page still drawing its trace: the request waits for it, not past it
    with admission.admit(90) as keep:
        keep(held, 80)
    ran.clear()
    thread = threading.Thread(target=request)
    thread.start()
    time.sleep(0.2)
    assert not ran.is_set() and admission.waiting() == 1
    del held
    thread.join(timeout=5)
    assert ran.is_set() and admission.in_flight == 0 and admission.running == 0
