"""The load-balance lab: Pulsar's load shedders, placement strategies and bundle splits on a
simulated cluster. ``settings`` holds the plain values, ``load`` the workload, the load model and
Pulsar's reports and sampling, ``shedders``, ``placement`` and ``split`` the strategies, ``lab``
the run loop and measures, ``channel`` the through-the-channel carrier, ``sweep`` the grid,
``scenarios`` seed 001's causes, ``conf`` an operator's inputs, ``recommend`` the
recommendation, ``plot`` the pictures, ``cli`` the commands and ``bench`` the benchmark figures.
See docs/balance.md."""
