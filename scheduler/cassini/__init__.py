"""Cassini's method (Rajasekaran et al., NSDI 2024): which placement, which time-shifts.

Its door is `plans` (Algorithm 2: `evaluate_candidate`, `choose`,
`plan_group` from `pacing`, `plan_link`); a pair's or a group's plan stays inside this
package until it returns. One question per module:

- circle: the unified circle of one link and each job's demand on it
- compatibility: how well the jobs sharing one link interleave (section 3)
- affinity: one time-shift per job from per-link shifts (Algorithm 1)
- candidates: equally good placements to choose among
- periods: which period each agent keeps so the circles stay true (our addition)
- holding: whether paced jobs hold their grid, and how long it must be
- pacing: how one group of coupled jobs runs: paced on which circle, or free
- plans: Algorithm 2 and the plan of each group of jobs that share links
- schedule: Cassini's placement and shifts for a whole trace placed at once
- timeshare: iterations of jobs that time-share GPUs (the interleaving model)
"""
