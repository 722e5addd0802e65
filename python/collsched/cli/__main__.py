"""``python -m collsched.cli ...`` (as under torchrun: ``torchrun ... -m collsched.cli bench``)."""
from collsched.cli import main

main()
