from consistent_catalog.cli.main import main

main()
