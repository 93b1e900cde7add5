"""The advisor: turns signals into findings (one category of docs/advisor.md, with evidence) and runs
experiments that fix them. No Textual, so `gpumon diagnose` and `gpumon experiment` work headless.

    build_signals(snapshots, job_view)  signals.py: what the rules read
    diagnose(signals) -> Finding         rules/: the step model's largest owner of idle, evidence, secondaries
    experiments_for(finding, signals)    catalogue.py: knobs to try, and the code change for the winners
    TrialRunner / LiveRunner             trial.py / live.py: measure variants (separate runs / the attached job)
    GuidedRun(runner).run()              guided.py: keep what wins beyond the noise, stop when nothing wins
    table / report_markdown              report.py: the results table, as text and Markdown
    diagnose_command / diagnose_pid      session.py: the headless sessions the CLI runs
"""
