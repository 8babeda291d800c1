"""The published numbers and findings the studies are held against (docs/studies.md)."""
import pandas as pd

RHN_PAPER = "Zilly et al. 2017, authors' README"
HSG_PAPER = "Shoham & Permuter 2018, Table 1"

# RHN paper Figure 5a / authors' README: 32M budget, depth 1..10, untied and with WT.
PTB_BUDGET = pd.DataFrame({
    "depth": range(1, 11),
    "units": [1275, 1180, 1110, 1050, 1000, 960, 920, 890, 860, 830],
    "valid": [92.4, 79.0, 75.0, 73.3, 72.0, 71.9, 71.7, 71.2, 71.3, 71.3],
    "test": [89.2, 76.3, 72.6, 70.9, 69.8, 69.3, 68.7, 68.5, 68.5, 68.3],
    "valid_wt": [93.2, 76.9, 72.7, 70.8, 69.7, 69.1, 68.7, 68.2, 68.1, 68.3],
    "test_wt": [90.6, 75.1, 70.6, 68.6, 67.7, 66.6, 66.4, 66.1, 66.0, 66.0],
}).set_index("depth")

# HSG paper Table 1: width 830, with and without Highway State Gating.
PTB_HSG = pd.DataFrame({
    "depth": [10, 20, 30, 40],
    "valid_hsg": [67.5, 65.6, 64.8, 64.7],
    "valid": [67.9, 66.4, 66.4, 66.7],
    "test_hsg": [65.0, 62.9, 62.0, 61.7],
    "test": [65.4, 63.2, 63.4, 63.6],
}).set_index("depth")

# RHN paper, section 5.1 and Figure 4 (JSB Chorales), in our words.
JSB_FINDING = ("RHN paper (section 5.1, Figure 4): with random optimization settings, the best "
               "RHNs do not get worse as the recurrence gets deeper, while DT-RNN and DT(S)-RNN "
               "settings spread out and get worse at depths 4 and 6, many of them failing to "
               "train or diverging.")

# RHN paper, section 5.2.1 and Figure 5a (PTB at a fixed budget), in our words.
PTB_BUDGET_FINDING = ("RHN paper (section 5.2.1, Figure 5a): at a fixed parameter budget on "
                      "PTB, deeper and narrower RHNs reach lower perplexity than depth 1, the "
                      "gains levelling off around depths 5 to 8.")
