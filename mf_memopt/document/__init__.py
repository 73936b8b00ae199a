"""The document: the YAML as read (`source`, `yamlload`, `reading`, `inherit`), its errors (`errors`), the recorded
cell trees the patterns are matched against (`tree`) and the pattern rules (`patterns`). The lowest floor: it
imports nothing else of mf_memopt.
"""
