"""Terminal views of wavefuse: plan, explain, candidates, wave timeline, coalescing and
LDS bank maps, annotated HIP source.

Each view has a data builder (plain dataclasses, what tests check) and a function that
returns a rich renderable (what `wavefuse view` and the tutorials print)::

    from compiler.cli.views import plan_view, candidates_view, timeline_view
    console.print(plan_view(fuse(graph)))
    console.print(candidates_view(tune_result.dispatches[0], sort="coalescing"))
    console.print(timeline_view(gpusim.simulate(kernel, DEFAULT_ARCH, trace=True)))
"""

from gpusim.hw import DEFAULT_ARCH

from compiler.cli.views.candidates import (SORT_KEYS, CandidatesData, CandidateRow, candidates_data, candidates_view)
from compiler.cli.views.common import ViewError
from compiler.cli.views.memory import (BanksData, CoalescingData, banks_data, banks_view, coalescing_data, coalescing_view, memory_insts, most_conflicted, pattern_for, worst_coalesced)
from compiler.cli.views.plan import (ExplainRow, PlanData, explain_data, explain_rows_view, explain_view, plan_data, plan_view)
from compiler.cli.views.search import SearchData, search_data, search_view
from compiler.cli.views.source import SourceData, source_data, source_view, statement_lines
from compiler.cli.views.timeline import KINDS, TimelineData, timeline_data, timeline_view

__all__ = ["ViewError", "SORT_KEYS", "CandidatesData", "CandidateRow", "candidates_data",
           "candidates_view", "BanksData", "CoalescingData", "banks_data", "banks_view",
           "coalescing_data", "coalescing_view", "memory_insts", "most_conflicted",
           "pattern_for", "worst_coalesced", "ExplainRow", "PlanData", "explain_data",
           "explain_rows_view", "explain_view", "plan_data", "plan_view", "SourceData", "source_data",
           "source_view", "statement_lines", "KINDS", "TimelineData", "timeline_data",
           "timeline_view", "SearchData", "search_data", "search_view"]
