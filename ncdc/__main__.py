from ncdc.cli.main import main

main()
