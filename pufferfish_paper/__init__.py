"""pufferfish reproduce: regenerate the paper's figures and tables."""
