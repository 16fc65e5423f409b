"""The gate between the workers' operations and a quiet sample waits for neither side for ever."""

import threading

import pytest

from simulator.stopping import RunFailed
from simulator.workers import gate as workers
from simulator.workers.gate import Gate


def test_a_quiet_sample_gives_up_on_an_operation_that_does_not_end(monkeypatch):
    monkeypatch.setattr(workers, "GATE_SECONDS", 0.2)
    gate = Gate()
    with gate.operation():
        with pytest.raises(RunFailed, match="an operation of the workers did not end within 0.2 s"):
            with gate.quiet():
                pass
    with gate.operation():  # the gate is open again: the sample that gave up holds nothing
        pass


def test_a_worker_gives_up_on_a_quiet_sample_that_does_not_end(monkeypatch):
    monkeypatch.setattr(workers, "GATE_SECONDS", 0.2)
    gate, failed = Gate(), []

    def operate() -> None:
        with pytest.raises(RunFailed, match="a quiet sample held the workers for more than 0.2 s") as raised:
            with gate.operation():
                pass
        failed.append(raised.value)

    with gate.quiet():
        worker = threading.Thread(target=operate)
        worker.start()
        worker.join(5)
    assert failed
