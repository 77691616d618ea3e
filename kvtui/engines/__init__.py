"""Engine grammars: SGLang and vLLM startup logs -> typed events. Pure core."""
