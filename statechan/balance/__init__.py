"""The load-balance lab: Pulsar's load shedders and placement strategies on a simulated cluster
(issue 26). ``settings`` holds the plain values, ``load`` the workload and load model,
``shedders`` and ``placement`` the strategies, ``lab`` the run loop and measures, ``channel``
the through-the-channel carrier, ``sweep`` the grid, ``plot`` the pictures, ``cli`` the commands
and ``bench`` the benchmark figures. See docs/balance.md."""
