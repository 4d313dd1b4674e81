from kcli.cli.app import main

main()
