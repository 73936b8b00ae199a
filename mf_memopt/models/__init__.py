"""The model families' implementations: `llama` (MindFormers' legacy Llama and the models sharing its keys) and
`mcore` (MindFormers' mcore models). Each fills in the parts its declaration names (`family.ModelFamily`), and is
reached only through the registry (`family.REGISTRY`): no stage imports a family.
"""
