"""The invariant catalogue: named properties of the channel, each one function, and the record
replay that shows them a trace. It reads observations and records, never a simulator or a store,
so every engine (simulator, checker, bench, auditor) can import it without loading the others."""
