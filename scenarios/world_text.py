"""The demo world's vocabulary: name stems, people, cities, products, and the sentence templates
of its profile paragraphs, dated archive paragraphs and question phrasings (en, zh).

Phrasings per attribute (QUESTIONS): 0-1 training, 2 dev, 3 held-out test, 4-5 and 6-9 closed-book
paraphrases only (see scenarios/world.py).
"""

# fmt: off
# (word lists and templates: laid out as tables, not one item a line)

UNANSWERABLE = "employees"  # asked about, but stated nowhere in the world

STEMS_EN = ["Vel", "Kor", "Aster", "Brin", "Cal", "Dor", "Emb", "Fen", "Gal", "Hal", "Istr", "Jor",
            "Kest", "Lum", "Mar", "Nov", "Orl", "Pell", "Quin", "Ros", "Sol", "Tam", "Ulm", "Varr",
            "Wex", "Yor", "Zan", "Alb", "Bel", "Cor", "Dun", "Elm", "Fal", "Gor", "Hav", "Ior"]
ENDS_EN = ["ova", "ex", "ion", "ara", "eth", "ix", "una", "oria", "ant", "ell"]
# More stems for worlds larger than the 36 above can name (one organisation per 3-letter prefix):
# consonant-vowel-consonant syllables, used only after the list above is exhausted, so the
# worlds it names stay as they were.
STEMS_EN_MORE = [c + v + t for c in "BDFGLMNPRSTVZ" for v in "aeiou" for t in "rnld"
                 if (c + v + t) not in {x[:3] for x in STEMS_EN}]
SECTORS_EN = [("Dynamics", "engineering"), ("Energy", "energy"), ("Foods", "food"),
              ("Logistics", "logistics"), ("Labs", "research"), ("Textiles", "textile"),
              ("Robotics", "robotics"), ("Pharma", "pharmaceutical")]
FIRST_EN = ["Alice", "Bruno", "Clara", "Daniel", "Elena", "Felix", "Grace", "Hugo", "Irene", "Jonas",
            "Karin", "Leo", "Maya", "Nathan", "Olivia", "Paul", "Rosa", "Simon", "Tara", "Victor",
            "Wendy", "Yusuf", "Zoe", "Martin", "Nora", "Oscar", "Lena", "Igor", "Helen", "Adam"]
LAST_EN = ["Hartmann", "Okafor", "Lindqvist", "Moreau", "Tanaka", "Brennan", "Kowalski", "Ferreira",
           "Novak", "Sandoval", "Whitlock", "Haddad", "Jensen", "Costa", "Ivanova", "Mbeki",
           "Larsen", "Duval", "Romano", "Fischer", "Kaur", "Petrov", "Nakamura", "Quinn"]
CITIES_EN = ["Lyon", "Osaka", "Porto", "Gdansk", "Calgary", "Adelaide", "Tampere", "Leipzig", "Bilbao",
             "Utrecht", "Brno", "Graz", "Aarhus", "Genoa", "Nantes", "Valencia", "Krakow", "Malmo",
             "Dundee", "Halifax", "Durban", "Cordoba", "Pune", "Busan"]
PRODUCTS_EN = ["Nimbus", "Atlas", "Orion", "Beacon", "Quill", "Harbor", "Prism", "Falcon", "Cobalt",
               "Meridian", "Summit", "Lantern"]
STEMS_ZH = list("恒瑞华宇天润嘉禾远航博达鼎新星辰云帆金桥海纳")
# More characters for larger worlds, drawn only after the ones above (see STEMS_EN_MORE).
STEMS_ZH_MORE = list("安昌盛祥泰丰隆兴广信诚和合益利通明光晨曦瀚泽松柏峰岳凯旋腾飞锦程立德康宁永佳")
SECTORS_ZH = [("科技", "科技"), ("能源", "能源"), ("食品", "食品"), ("物流", "物流"), ("制药", "制药"),
              ("纺织", "纺织")]
SURNAMES_ZH = list("王李张刘陈杨黄赵周吴徐孙马朱胡郭何林罗高")
GIVEN_ZH = ["伟", "芳", "娜", "敏", "静", "强", "磊", "洋", "艳", "勇", "军", "杰", "娟", "涛", "明",
            "超", "秀英", "建华", "志强", "晓东", "丽华", "海燕"]
CITIES_ZH = ["成都", "杭州", "武汉", "西安", "苏州", "南京", "青岛", "厦门", "长沙", "郑州", "合肥",
             "宁波", "大连", "昆明", "福州", "无锡", "济南", "沈阳"]
PRODUCTS_ZH = ["星云", "天枢", "北斗", "青鸾", "玄武", "鲲鹏", "凌云", "启明"]

# Profile paragraph (current value, no date) and archive paragraph (older value, dated).
PROFILE = {
    "en": {
        "ceo": "{org} is led by chief executive officer {v}, who oversees the company's {sector} business.",
        "headquarters": "{org} has its headquarters in {v}, where most of its {sector} staff work.",
        "founded": "{org} was founded in {v} as a small {sector} business.",
        "net_profit": "For its most recent fiscal year, {org} reported a net profit of {v}.",
        "product_version": "The latest version of {org}'s flagship product {product} is {v}.",
    },
    "zh": {
        "ceo": "{org}的首席执行官是{v}，负责公司的{sector}业务。",
        "headquarters": "{org}的总部位于{v}，大部分{sector}员工在那里工作。",
        "founded": "{org}成立于{v}年，最初是一家小型{sector}企业。",
        "net_profit": "{org}最近一个财年的净利润为{v}。",
        "product_version": "{org}旗舰产品{product}的最新版本是{v}。",
    },
}
ARCHIVE = {
    "en": {
        "ceo": "As of {year}, the chief executive officer of {org} was {v}.",
        "headquarters": "In {year}, {org} had its headquarters in {v}.",
        "net_profit": "For fiscal {year}, {org} reported a net profit of {v}.",
        "product_version": "In {year}, the latest version of {org}'s flagship product {product} was {v}.",
    },
    "zh": {
        "ceo": "截至{year}年，{org}的首席执行官是{v}。",
        "headquarters": "{year}年，{org}的总部位于{v}。",
        "net_profit": "{year}财年，{org}的净利润为{v}。",
        "product_version": "{year}年，{org}旗舰产品{product}的最新版本是{v}。",
    },
}
QUESTIONS = {
    "en": {
        "ceo": ["Who is the CEO of {org}?", "Who is the chief executive officer of {org}?",
                "Who currently leads {org} as chief executive?", "Name the person who runs {org} as its CEO.",
                "Tell me who the CEO of {org} is.", "{org} has which chief executive?",
                # 6-9: written with world.wordings > 6
                "Who holds the top executive job at {org}?", "Which executive heads {org}?",
                "Who is {org}'s chief executive?", "I'd like to know the CEO of {org}."],
        "headquarters": ["Where is {org} headquartered?", "In which city is the headquarters of {org}?",
                         "Where are {org}'s head offices located?", "Which city is home to {org}'s headquarters?",
                         "What city is {org} based in?", "Tell me where {org} has its headquarters.",
                         # 6-9: written with world.wordings > 6
                         "In what city does {org} keep its headquarters?", "Where is the headquarters of {org}?",
                         "Name the city where {org} is headquartered.", "{org}'s headquarters are in which city?"],
        "founded": ["When was {org} founded?", "In what year was {org} established?",
                    "What is the founding year of {org}?", "Which year did {org} start operating?",
                    "{org} was founded in which year?", "Tell me the year {org} was established.",
                    # 6-9: written with world.wordings > 6
                    "When did {org} come into being?", "{org} was set up in what year?",
                    "In which year was {org} created?", "What year was {org} launched?"],
        "net_profit": ["What was {org}'s net profit in its latest fiscal year?",
                       "How much net profit did {org} report for its most recent fiscal year?",
                       "What net profit did {org} post most recently?",
                       "What is the latest annual net profit of {org}?",
                       "Tell me {org}'s net profit for its most recent fiscal year.",
                       "{org} reported what net profit in its latest fiscal year?",
                       # 6-9: written with world.wordings > 6
                       "How much did {org} earn in net profit last fiscal year?",
                       "What were {org}'s net earnings in its latest fiscal year?",
                       "{org}'s most recent fiscal year brought what net profit?",
                       "Give me the net profit {org} reported for its last fiscal year."],
        "product_version": ["What is the latest version of {product} by {org}?",
                            "Which version of {org}'s {product} is the newest?",
                            "What is the current version number of {org}'s flagship product {product}?",
                            "What's the most recent release of {product} from {org}?",
                            "Tell me the newest version of {org}'s {product}.",
                            "{product} by {org} is at which version now?",
                            # 6-9: written with world.wordings > 6
                            "Which version is {org}'s {product} on now?", "What version of {product} did {org} ship last?",
                            "Up to which version has {org} taken {product}?",
                            "Give me the latest {product} version from {org}."],
        UNANSWERABLE: ["How many employees does {org} have?", "What is the size of {org}'s workforce?",
                       "How many people work at {org}?", "How many staff does {org} employ?",
                       "Tell me the number of employees at {org}.", "{org} has how many employees?",
                       # 6-9: written with world.wordings > 6
                       "How large is {org}'s staff?", "What is {org}'s headcount?",
                       "How many workers does {org} have?", "Give me {org}'s employee count."],
    },
    "zh": {
        "ceo": ["{org}的首席执行官是谁？", "谁是{org}的CEO？", "目前谁担任{org}的首席执行官？",
                "{org}现在由哪位首席执行官领导？", "请告诉我{org}的首席执行官。", "{org}的CEO叫什么名字？",
                # 6-9: written with world.wordings > 6
                "{org}的CEO是哪位？", "{org}的首席执行官叫什么？",
                "执掌{org}的首席执行官是谁？", "告诉我{org}的CEO是谁。"],
        "headquarters": ["{org}的总部在哪里？", "{org}的总部位于哪个城市？", "{org}的总部设在哪座城市？",
                         "哪个城市是{org}总部所在地？", "请告诉我{org}总部所在的城市。", "{org}总部在哪个城市？",
                         # 6-9: written with world.wordings > 6
                         "{org}的总部在什么地方？", "{org}总部位于何处？",
                         "{org}的总公司在哪个城市？", "{org}的总部所在城市是？"],
        "founded": ["{org}成立于哪一年？", "{org}是哪一年创立的？", "{org}的创立年份是哪年？",
                    "{org}是在哪一年开始运营的？", "请告诉我{org}的成立年份。", "{org}创办于哪一年？",
                    # 6-9: written with world.wordings > 6
                    "{org}是什么时候成立的？", "{org}创建于哪一年？",
                    "{org}成立的年份是？", "{org}是哪年建立的？"],
        "net_profit": ["{org}最近一个财年的净利润是多少？", "{org}最新财年的净利润为多少？",
                       "{org}最近公布的年度净利润是多少？", "{org}最新的年度净利润是多少？",
                       "请告诉我{org}最近一个财年的净利润。", "{org}上一财年净利润多少？",
                       # 6-9: written with world.wordings > 6
                       "{org}上个财年赚了多少净利润？", "{org}最近一个财年的净利是多少？",
                       "{org}最新一个财年实现净利润多少？", "告诉我{org}最近财年的净利润。"],
        "product_version": ["{org}的{product}最新版本是多少？", "{org}旗舰产品{product}的最新版本号是什么？",
                            "{product}（{org}）目前的最新版本是哪个？", "{org}最新发布的{product}是哪个版本？",
                            "请告诉我{org}的{product}的最新版本。", "{org}的{product}现在是什么版本？",
                            # 6-9: written with world.wordings > 6
                            "{org}的{product}目前更新到哪个版本了？", "{org}的{product}版本号现在是多少？",
                            "{org}{product}的当前版本是什么？", "告诉我{org}的{product}现在的版本号。"],
        UNANSWERABLE: ["{org}有多少名员工？", "{org}的员工规模是多少？", "有多少人在{org}工作？",
                       "{org}雇用了多少员工？", "请告诉我{org}的员工人数。", "{org}员工有多少人？",
                       # 6-9: written with world.wordings > 6
                       "{org}共有多少员工？", "{org}的员工总数是多少？",
                       "{org}有多少雇员？", "告诉我{org}有多少名员工。"],
    },
}
# fmt: on
