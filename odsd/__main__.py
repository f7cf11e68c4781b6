from odsd.cli import main

main()
