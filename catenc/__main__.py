from catenc.cli import main

main()
