"""`vfleet upgrade-check`: what moving a deployment to another vLLM release breaks, what it
changes without a word, and which metric names it moves."""
