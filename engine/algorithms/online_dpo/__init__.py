"""Online DPO: its preset section (`config`, torch-free), the ranking of a prompt's two
sampled completions (`ranking`, torch-free) and its trainer (`trainer`). Importing this
package loads none of them."""
