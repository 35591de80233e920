"""GPU node agent: reads NVML and posts a report to the GPU quota portal.

Deliberately free of Django and of the portal's code so it can ship as a small DaemonSet
image whose only third-party dependency is ``nvidia-ml-py``. See ``docs/agent.md``.
"""

__version__ = "0.1.0"
