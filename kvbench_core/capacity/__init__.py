"""Capacity: the largest load at which every QoS class meets its SLA, measured in judged steps.

``step`` holds a load until every class has enough completed requests for its percentile and judges the
step on the merged histogram of its own requests; ``search`` chooses the next load (doubling, then
bisection); ``interval`` turns the judged steps into the answer and its bootstrap confidence interval.
The ``qos`` and ``sla_search`` autoscalers (builtins) both judge through these, so ``kvbench run`` and
``kvbench capacity`` give one answer by one rule (docs/autoscaling.md).
"""
