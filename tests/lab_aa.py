"""The settings of the lab's A/A regression test, shared with the calibration that bounds how
often it may wrongly FAIL.

``tests/lab/engine/test_regress_lab.py`` swaps a byte-identical copy of the kubelet in as the
candidate and asserts the gate does not FAIL. The gate promises a wrong FAIL at most
(1 - confidence) / 2 of the time, not never: at the playbook's 0.95 the lab's own rounds
(``fixtures/lab/aa_rounds.csv``) FAIL such an A/A about 0.7 % of the time at these looks, which
CI met once. At 0.999 the same rounds FAIL it about 0.02 % of the time
(``tests/unit/stats/test_lab_aa_calibration.py``), so a FAIL there says the swap itself
slows the candidate, not chance.
"""

from __future__ import annotations

#: blocks before the first look and the cap: looks at 2 and 4 blocks
ROUNDS, MAX_ROUNDS = 2, 4
CONFIDENCE = 0.999
